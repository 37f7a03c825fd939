from collections.abc import Iterator

import pytest
from pulumi.runtime import settings as pulumi_settings

from sparkrack.ops import claims
from sparkrack.transport import ssh


@pytest.fixture(autouse=True)
def fresh_pulumi_runtime() -> Iterator[None]:
    """Each program run gets its own settings, config and root stack."""
    yield
    pulumi_settings.reset_options()


@pytest.fixture(autouse=True)
def every_node_available(monkeypatch: pytest.MonkeyPatch) -> None:
    """The program asks each node once before wiring (resources.availability); under mocks
    there are no nodes, and a test that wants one unavailable patches this again."""
    monkeypatch.setattr(ssh, "unavailable", lambda targets, only_pinned=False: {})


@pytest.fixture(autouse=True)
def no_other_stacks(monkeypatch: pytest.MonkeyPatch) -> None:
    """The program reads the other stacks' claims with the Pulumi CLI (ops.claims); under mocks
    there is no backend, and a test that wants other stacks patches this again."""
    monkeypatch.setattr(claims, "other_claims", lambda stack, project_dir: claims.OtherClaims())

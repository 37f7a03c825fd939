from collections.abc import Iterator

import pytest
from pulumi.runtime import settings as pulumi_settings

from sparkrack import ssh


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

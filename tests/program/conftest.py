from collections.abc import Iterator

import pytest
from pulumi.runtime import settings as pulumi_settings


@pytest.fixture(autouse=True)
def fresh_pulumi_runtime() -> Iterator[None]:
    """Each program run gets its own settings, config and root stack."""
    yield
    pulumi_settings.reset_options()

"""The package's rack: sim-16's private copy, the engine and monitoring images built first.

Every other node runs netplan, as Ubuntu and DGX OS do, the rest Debian's networkd: both network
stacks deploy and verify on one rack.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sparkrack.sim.topology import SimTopology
from tests.e2e.sim_fixtures import engine_rack

STACK, PREFIX = "e2e-16", "198.18.16"


@pytest.fixture(scope="package")
def sim16() -> Iterator[SimTopology]:
    yield from engine_rack("sim-16", STACK, PREFIX, netplan_every=2)

"""The simulated racks for the e2e tests, and SSH to them with the cluster's own settings.

The racks are read from the shipped stacks (sim-2, sim-16) through the spec and the plan, then
given their own stack name and /24, so a developer's running `sim-2` is never touched (Podman
would also refuse the same subnet twice).
"""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator

import pytest

from sparkrack.sim import cluster
from sparkrack.sim.keys import ssh_command
from sparkrack.sim.stack import topology_for_stack
from sparkrack.sim.topology import SimTopology

HOST_TOOLS = ("podman", "runc", "debootstrap", "ip", "nsenter", "ssh", "ssh-keygen")


def shipped_rack(stack: str, test_stack: str, mgmt_prefix: str) -> SimTopology:
    """The shipped stack's rack, renamed and moved to `mgmt_prefix`.0/24."""
    topology = topology_for_stack(stack)
    moved = tuple(
        dataclasses.replace(node, mgmt_address=f"{mgmt_prefix}.{node.mgmt_address.split('.')[3]}")
        for node in topology.nodes
    )
    return dataclasses.replace(
        topology, stack=test_stack, nodes=moved, mgmt_subnet=f"{mgmt_prefix}.0/24"
    )


def ssh(stack: str, node: str, command: str, check: bool = True) -> str:
    """stdout of `command` on the node over real SSH (pinned host keys, the cluster's key)."""
    done = subprocess.run(
        ssh_command(stack, node, command), capture_output=True, text=True, timeout=120
    )
    if check and done.returncode != 0:
        pytest.fail(
            f"stack {stack}, node {node}: `{command}` exited {done.returncode}:\n"
            f"{done.stdout}\n{done.stderr}"
        )
    return done.stdout.strip()


def poll(read: Callable[[], str], done: Callable[[str], bool], timeout: float = 120) -> str:
    """Read until `done` holds or the time is up; returns the last reading either way."""
    deadline = time.monotonic() + timeout
    value = read()
    while not done(value) and time.monotonic() < deadline:
        time.sleep(0.5)
        value = read()
    return value


def require_host_tools() -> None:
    missing = [tool for tool in HOST_TOOLS if shutil.which(tool) is None]
    if missing:
        pytest.fail(f"the simulated cluster needs {', '.join(missing)} on this host (as root)")


@pytest.fixture(scope="module")
def sim2() -> Iterator[SimTopology]:
    """sim-2's topology, up once for the module and removed at its end."""
    require_host_tools()
    topology = shipped_rack("sim-2", "e2e-2", "198.18.2")
    cluster.up(topology, print)
    yield topology
    cluster.down(topology, print)

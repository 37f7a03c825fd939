"""CPU: IRQs on the housekeeping cores, inference on the compute cores (seed 000: IRQs on the
compute cores took 20 tok/s down to 4)."""

from __future__ import annotations

from typing import Any

import pytest

from sparkrack.facts.defaults import assignments
from sparkrack.facts.proc import cpus_allowed, irq_affinity, nic_irqs
from sparkrack.verify.checks.readings import container_record, cpus, read
from sparkrack.verify.checks.subjects import Container, Node, needs

IRQBALANCE_DEFAULTS = "/etc/default/irqbalance"
BANNED = "IRQBALANCE_BANNED_CPULIST"


@needs("cpu_pinning")
def test_irqbalance_banned(host: Any, node: Node) -> None:
    banned = read(host, assignments(IRQBALANCE_DEFAULTS)).get(BANNED, "")
    want = node.node.cpus.irqbalance_banned
    assert cpus(banned) == cpus(want), (
        f"irqbalance bans {banned or 'no cores'!r} in {IRQBALANCE_DEFAULTS}, "
        f"want {want or 'none'!r}"
    )


@needs("cpu_pinning")
def test_nic_irq_affinity(host: Any, node: Node) -> None:
    declared = node.node.cpus.nic_irqs
    if declared == "none":
        pytest.skip(f"hardware {node.node.hardware} declares nic_irqs: none (no NIC IRQs)")
    irqs = read(host, nic_irqs())
    assert irqs, (
        f"no {declared} IRQs in /proc/interrupts, yet hardware {node.node.hardware} declares "
        "its NICs raise them: is the ConnectX driver (mlx5_core) loaded?"
    )
    allowed = cpus(node.node.cpus.housekeeping)
    outside = {}
    for irq in irqs:
        affinity = read(host, irq_affinity(int(irq)))
        if not cpus(affinity) <= allowed:
            outside[irq] = affinity
    assert not outside, (
        f"mlx5 IRQs outside housekeeping {node.node.cpus.housekeeping}: "
        + ", ".join(f"IRQ {irq} on {cores}" for irq, cores in outside.items())
    )


@needs("cpu_pinning", "inference")
def test_container_cpuset(host: Any, container: Container) -> None:
    """The cores the container's process may run on, however they were set: rootless Podman on
    a cgroup v1 host ignores --cpuset-cpus and still reports success."""
    want = container.container.cpuset
    if not want:
        pytest.skip("CPU pinning is off in the stack: containers may use every core")
    state = container_record(host, container.user, container.container.name)["State"]
    assert state["Pid"], f"{container.container.name} has no process ({state['Status']})"
    found = read(host, cpus_allowed(state["Pid"]))
    assert cpus(found) == cpus(want), (
        f"{container.container.name} runs on cores {found or 'unknown'!r}, "
        f"want compute cores {want!r}"
    )

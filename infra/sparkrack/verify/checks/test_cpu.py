"""CPU: IRQs on the housekeeping cores, inference on the compute cores (seed 000: IRQs on the
compute cores took 20 tok/s down to 4)."""

from __future__ import annotations

from typing import Any

import pytest

from sparkrack.facts.defaults import assignments
from sparkrack.facts.proc import cpus_allowed, irq_affinity, nic_irqs
from sparkrack.facts.units import config_age, unit_state
from sparkrack.plan.cpus import IRQ_PIN_UNIT, IRQBALANCE_UNIT, irq_pin_files
from sparkrack.text.cpus import CpuList
from sparkrack.verify.checks.readings import container_record, read
from sparkrack.verify.checks.subjects import Container, Node, needs
from sparkrack.verify.inventory import Inventory

BANNED = "IRQBALANCE_BANNED_CPULIST"


@needs("cpu_pinning")
def test_irqbalance_banned(host: Any, inventory: Inventory, node: Node) -> None:
    defaults = inventory.plan.roles.cpu_pinning.irqbalance_defaults
    banned = read(host, assignments(defaults)).get(BANNED, "")
    want = node.node.cpus.irqbalance_banned
    assert want.holds(banned), (
        f"irqbalance bans {banned or 'no cores'!r} in {defaults}, want {want.kernel() or 'none'!r}"
    )


@needs("cpu_pinning")
def test_irqbalance_runs_its_ban(host: Any, inventory: Inventory, node: Node) -> None:
    """irqbalance reads its ban only when it starts: a ban written after that is not in force."""
    if not node.node.cpus.irqbalance_banned:
        pytest.skip("the Plan bans no cores from irqbalance (cpu_pinning.move_irqs is off)")
    assert_runs_its_config(
        host, IRQBALANCE_UNIT, (inventory.plan.roles.cpu_pinning.irqbalance_defaults,)
    )


@needs("cpu_pinning")
def test_irq_pin_applied(host: Any, inventory: Inventory, node: Node) -> None:
    """The pin unit pins at its start: a mask changed since has not been applied."""
    if not node.node.cpus.pinning:
        pytest.skip("CPU pinning is off in the stack")
    if node.node.cpus.nic_irqs == "none":
        pytest.skip(f"hardware {node.node.hardware} declares nic_irqs: none (no NIC IRQs)")
    assert_runs_its_config(host, IRQ_PIN_UNIT, irq_pin_files(inventory.plan.roles.cpu_pinning))


def assert_runs_its_config(host: Any, unit: str, files: tuple[str, ...]) -> None:
    state = read(host, unit_state(unit))
    assert state.active, f"{unit} is {state.active_state or 'unknown'}, want active"
    age = read(host, config_age(unit, files))
    assert not age.stale, (
        f"{unit} started before its config changed ({', '.join(files)}): it runs the old "
        f"settings; `systemctl restart {unit}` (or `up`) applies the new"
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
    allowed = node.node.cpus.housekeeping
    outside = {}
    for irq in irqs:
        affinity = read(host, irq_affinity(int(irq)))
        if not on_cores(affinity, allowed):
            outside[irq] = affinity
    assert not outside, (
        f"mlx5 IRQs outside housekeeping {node.node.cpus.housekeeping}: "
        + ", ".join(f"IRQ {irq} on {cores}" for irq, cores in outside.items())
    )


@needs("cpu_pinning", "inference")
def test_container_cpuset(host: Any, container: Container) -> None:
    """The engine's containers on the compute cores."""
    assert_runs_on_its_cores(host, container, "compute")


@needs("cpu_pinning", "monitoring")
def test_exporter_cpuset(host: Any, exporter: Container) -> None:
    """The exporters on the housekeeping cores, off the engine's: anything on the compute cores
    takes from decode (seed 000: IRQs there took 20 tok/s to 4)."""
    assert_runs_on_its_cores(host, exporter, "housekeeping")


def assert_runs_on_its_cores(host: Any, subject: Container, cores: str) -> None:
    """The cores the container's process may run on, however they were set: rootless Podman on
    a cgroup v1 host ignores --cpuset-cpus and still reports success."""
    want, name = subject.container.cpuset, subject.container.name
    if not want:
        pytest.skip("CPU pinning is off in the stack: containers may use every core")
    state = container_record(host, subject.user, name)["State"]
    assert state["Pid"], f"{name} has no process ({state['Status']})"
    found = read(host, cpus_allowed(state["Pid"]))
    assert want.holds(found), (
        f"{name} runs on cores {found or 'unknown'!r}, want {cores} cores {want.kernel()!r}"
    )


def on_cores(read: str, cores: CpuList) -> bool:
    """An IRQ's cores as /proc prints them are some of these: a freed IRQ ('') is on no core
    and so on none of the wrong ones; an unreadable list is not known to be on these."""
    try:
        return CpuList.parse(read).within(cores)
    except ValueError:
        return False

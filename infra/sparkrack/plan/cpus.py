"""CPU sets: housekeeping cores (A725 on GB10) take IRQs, exporters and sshd; compute cores
(X925) take inference. Seed 000 watched IRQs on the compute cores take 20 tok/s down to 4."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from sparkrack.stackspec import ClusterSpec, NodeSpec, StrictModel, format_cpulist, parse_cpulist
from sparkrack.stackspec.roles import CpuPinningRoleSpec

# The units the cpu_pinning role keeps running: the distribution's irqbalance (it reads its ban
# from its defaults file) and sparkrack's one-shot that pins the NIC IRQs (its mask is in it).
IRQBALANCE_UNIT = "irqbalance.service"
IRQ_PIN_UNIT = "sparkrack-irq-affinity.service"


def irq_pin_files(settings: CpuPinningRoleSpec) -> tuple[str, str]:
    """What the pin unit reads only when it starts: its script and its own unit file (the mask
    is in its ExecStart)."""
    return (settings.irq_script, f"/etc/systemd/system/{IRQ_PIN_UNIT}")


class CpuPlan(StrictModel):
    pinning: bool
    housekeeping: str  # cpulist: IRQs, exporters, the rest of the OS
    compute: str  # cpulist: the inference container's cpuset
    irq_affinity: str  # hex mask for /proc/irq/*/smp_affinity: the housekeeping cores
    irqbalance_banned: str  # cpulist for IRQBALANCE_BANNED_CPULIST: the compute cores
    nic_irqs: Literal["mlx5", "none"]  # the NIC driver whose IRQs take the housekeeping cores


def plan_cpus(spec: ClusterSpec, node: NodeSpec) -> CpuPlan:
    hardware = spec.hardware(node)
    layout = hardware.cpus
    if not spec.cpu_pinning.enabled:
        everything = format_cpulist(range(layout.count))
        return CpuPlan(
            pinning=False,
            housekeeping=everything,
            compute=everything,
            irq_affinity=affinity_mask(range(layout.count)),
            irqbalance_banned="",
            nic_irqs=hardware.nic_irqs,
        )
    housekeeping = node.overrides.housekeeping_cpus or layout.efficiency
    compute = node.overrides.compute_cpus or layout.performance
    return CpuPlan(
        pinning=True,
        housekeeping=housekeeping,
        compute=compute,
        irq_affinity=affinity_mask(parse_cpulist(housekeeping)),
        irqbalance_banned=compute if spec.cpu_pinning.move_irqs else "",
        nic_irqs=hardware.nic_irqs,
    )


def affinity_mask(cpus: Iterable[int]) -> str:
    """The kernel's mask format: hex, in comma-separated 32-bit groups, e.g. '7c1f'."""
    bits = sum(1 << cpu for cpu in cpus)
    text = f"{bits:x}"
    groups = [text[max(i - 8, 0) : i] for i in range(len(text), 0, -8)]
    return ",".join(reversed(groups))

"""CPU sets: housekeeping cores (A725 on GB10) take IRQs, exporters and sshd; compute cores
(X925) take inference. Seed 000 watched IRQs on the compute cores take 20 tok/s down to 4."""

from __future__ import annotations

from typing import Literal

from sparkrack.stackspec import ClusterSpec, NodeSpec, StrictModel
from sparkrack.stackspec.roles import CpuPinningRoleSpec
from sparkrack.text.cpus import NO_CPUS, CpuList

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
    housekeeping: CpuList  # IRQs, exporters, the rest of the OS
    compute: CpuList  # the inference container's cpuset
    irq_affinity: str  # housekeeping.mask(), for /proc/irq/*/smp_affinity (the Plan's JSON has it)
    irqbalance_banned: CpuList  # for IRQBALANCE_BANNED_CPULIST: the compute cores, or none
    nic_irqs: Literal["mlx5", "none"]  # the NIC driver whose IRQs take the housekeeping cores

    def cpuset(self, cores: CpuList) -> CpuList:
        """A container's cpuset on these cores: none when pinning is off (any core will do)."""
        return cores if self.pinning else NO_CPUS


def plan_cpus(spec: ClusterSpec, node: NodeSpec) -> CpuPlan:
    hardware = spec.hardware(node)
    layout = hardware.cpus
    if not spec.cpu_pinning.enabled:
        everything = CpuList.of(range(layout.count))
        return CpuPlan(
            pinning=False,
            housekeeping=everything,
            compute=everything,
            irq_affinity=everything.mask(),
            irqbalance_banned=NO_CPUS,
            nic_irqs=hardware.nic_irqs,
        )
    housekeeping = node.overrides.housekeeping_cpus or layout.efficiency
    compute = node.overrides.compute_cpus or layout.performance
    return CpuPlan(
        pinning=True,
        housekeeping=housekeeping,
        compute=compute,
        irq_affinity=housekeeping.mask(),
        irqbalance_banned=compute if spec.cpu_pinning.move_irqs else NO_CPUS,
        nic_irqs=hardware.nic_irqs,
    )

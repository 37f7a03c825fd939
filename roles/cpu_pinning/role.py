"""The cpu_pinning role: irqbalance banned from the compute cores, NIC IRQs pinned at boot.

Both read their settings only when they start (irqbalance its ban, the pin unit its mask), so a
changed ban or mask restarts them now (Unit `reloads`), not at the next boot: seed 000's 20 to
4 tok/s was IRQs on the compute cores while the files said otherwise."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi

from roles.common import render, token
from sparkrack.plan import NodePlan
from sparkrack.plan.cpus import IRQ_PIN_UNIT, IRQBALANCE_UNIT, irq_pin_files
from sparkrack.resources.blocks import FileBlock, FileBlockArgs
from sparkrack.resources.files import RemoteFile, RemoteFileArgs
from sparkrack.resources.units import Unit, UnitArgs
from sparkrack.stackspec.roles import CpuPinningRoleSpec
from sparkrack.transport.target import Target

ROLE = "cpu_pinning"


def irq_script(settings: CpuPinningRoleSpec) -> str:
    return render(ROLE, "irq-affinity.sh", pattern=settings.irq_pattern)


@dataclass(frozen=True)
class CpuPinningArgs:
    node: NodePlan
    target: Target  # how the program reaches the node
    settings: CpuPinningRoleSpec  # the Plan's roles.cpu_pinning


class CpuPinning(pulumi.ComponentResource):
    """One node's CPU pinning. Output: compute_cpuset, the cores inference containers get."""

    def __init__(
        self, name: str, args: CpuPinningArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(token(ROLE), name, None, opts)
        node = args.node
        cpus, config = node.cpus, args.settings
        target, child = args.target, pulumi.ResourceOptions(parent=self)
        self.compute_cpuset = cpus.compute.kernel()
        if cpus.pinning:
            if cpus.irqbalance_banned:
                banned = render(ROLE, "irqbalance", banned=cpus.irqbalance_banned.kernel())
                path = config.irqbalance_defaults
                block = FileBlockArgs(target, path, "cpu-pinning", banned, restarts=IRQBALANCE_UNIT)
                ban = FileBlock(f"{node.name}-irqbalance-ban", block, child)
                # The distribution's daemon, running before sparkrack came: a destroy leaves it
                # running (retain_on_delete), on the file as the ban's removal left it.
                Unit(
                    f"{node.name}-irqbalance",
                    UnitArgs(target, IRQBALANCE_UNIT, reloads=(path,)),
                    pulumi.ResourceOptions(parent=self, depends_on=[ban], retain_on_delete=True),
                )
            self.pin_irqs(node, target, config)
        self.register_outputs({"compute_cpuset": self.compute_cpuset})

    def pin_irqs(self, node: NodePlan, target: Target, config: CpuPinningRoleSpec) -> None:
        child = pulumi.ResourceOptions(parent=self)
        script_file = RemoteFileArgs(
            target, config.irq_script, irq_script(config), "0755", restarts=IRQ_PIN_UNIT
        )
        script = RemoteFile(f"{node.name}-irq-script", script_file, child)
        unit_text = render(
            ROLE,
            "irq-affinity.service",
            housekeeping=node.cpus.housekeeping.kernel(),
            script=config.irq_script,
            mask=node.cpus.irq_affinity,
        )
        unit_path = irq_pin_files(config)[1]  # templates/irq-affinity.service
        unit_args = RemoteFileArgs(target, unit_path, unit_text, restarts=IRQ_PIN_UNIT)
        unit_file = RemoteFile(f"{node.name}-irq-unit-file", unit_args, child)
        Unit(
            f"{node.name}-irq-unit",
            UnitArgs(target, IRQ_PIN_UNIT, reloads=irq_pin_files(config)),
            pulumi.ResourceOptions(parent=self, depends_on=[script, unit_file]),
        )

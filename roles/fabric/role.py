"""The fabric role: ARP answered only on the owning port, then each link up, at its MTU, then
addressed; persisted; then DHCP's links leased by udhcpc (seed 000's bridge script)."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi

from roles.common import render, token
from sparkrack.plan import NodePlan
from sparkrack.plan.fabric import LinkPlan
from sparkrack.resources.files import RemoteFile, RemoteFileArgs
from sparkrack.resources.links import Link, LinkArgs
from sparkrack.resources.network import FabricConfig
from sparkrack.resources.packages import Packages
from sparkrack.resources.sysctls import Sysctl
from sparkrack.resources.units import Unit, UnitArgs
from sparkrack.stackspec.roles import FabricRoleSpec
from sparkrack.transport.target import Target

ROLE = "fabric"
DHCP_UNIT = "sparkrack-udhcpc@.service"  # templates/udhcpc.service, one instance per port


def persisted_link(link: LinkPlan) -> dict[str, object]:
    return {"netdev": link.netdev, "mtu": link.mtu, "address": link.address or ""}


@dataclass(frozen=True)
class FabricArgs:
    node: NodePlan
    target: Target  # how the program reaches the node
    settings: FabricRoleSpec  # the Plan's roles.fabric


class Fabric(pulumi.ComponentResource):
    """One node's fabric links. Output: netdevs, in the Plan's apply order."""

    def __init__(
        self, name: str, args: FabricArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(token(ROLE), name, None, opts)
        node, self.settings = args.node, args.settings
        target = args.target
        sysctls: list[pulumi.Resource] = [
            Sysctl(f"{node.name}-{key}", target, key, value, pulumi.ResourceOptions(parent=self))
            for key, value in sorted(node.sysctls.items())
        ]
        # The first link waits for the sysctls, and each link for the one before it.
        links: list[pulumi.Resource] = []
        for link in node.links:
            if link.addressing == "static":
                links.append(self.static_link(node, target, link, links[-1:] or sysctls))
        if node.links:
            after = pulumi.ResourceOptions(parent=self, depends_on=links or sysctls)
            persisted = [persisted_link(link) for link in node.links]
            config = FabricConfig(f"{node.name}-fabric-config", target, persisted, opts=after)
            dhcp = [link for link in node.links if link.addressing == "dhcp"]
            if dhcp:  # up and at their MTU (the config), then leased
                self.dhcp_links(node, target, dhcp, config)
        self.netdevs = [link.netdev for link in node.links]
        self.register_outputs({"netdevs": self.netdevs})

    def static_link(
        self, node: NodePlan, target: Target, link: LinkPlan, after: list[pulumi.Resource]
    ) -> Link:
        """One Link: its steps (up, MTU, address) are applied in that order by the resource.
        Links go one after another, as the Plan orders them."""
        addresses = [link.address] if link.address else []
        return Link(
            f"{node.name}-{link.netdev}",
            LinkArgs(target, link.netdev, link.mtu, addresses),
            pulumi.ResourceOptions(parent=self, depends_on=after),
        )

    def dhcp_links(
        self, node: NodePlan, target: Target, links: list[LinkPlan], config: FabricConfig
    ) -> None:
        """busybox, the udhcpc bridge script, its template unit, one started instance per link:
        starting one waits for its lease (udhcpc forks once bound)."""
        child = pulumi.ResourceOptions(parent=self)
        package = Packages(
            f"{node.name}-dhcp-client", target, [self.settings.dhcp_client_package], opts=child
        )
        script_path = self.settings.dhcp_script
        script_args = RemoteFileArgs(target, script_path, render(ROLE, "udhcpc-script"), "0755")
        script = RemoteFile(f"{node.name}-udhcpc-script", script_args, child)
        unit_path, unit_text = (
            f"/etc/systemd/system/{DHCP_UNIT}",
            render(ROLE, "udhcpc.service", script=script_path),
        )
        unit_file = RemoteFile(
            f"{node.name}-udhcpc-unit", RemoteFileArgs(target, unit_path, unit_text), child
        )
        after = pulumi.ResourceOptions(parent=self, depends_on=[package, script, unit_file, config])
        instance = DHCP_UNIT.replace("@.", "@{}.")
        for link in links:
            unit = UnitArgs(target, instance.format(link.netdev))
            Unit(f"{node.name}-dhcp-{link.netdev}", unit, after)

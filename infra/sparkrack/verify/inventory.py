"""What `sparkrack verify` hands its checks: the Plan itself (the deployed one: the program's own,
handed on stdin at the end of `up`, or read back from the stack's output), the roles whose work
is checked (the Plan's, `Plan.deploys`, unless told fewer), and the nodes that cannot be checked
this run.

The checks read the Plan's own models (NodePlan, LinkPlan, PingCheck, ContainerPlan, ...), never a
copy of their values; what they expect beyond a field is derived here, from the Plan alone.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Collection
from pathlib import Path

from pydantic import Field

from sparkrack.plan.fabric import LinkPlan
from sparkrack.plan.model import NodePlan, Plan
from sparkrack.plan.monitoring import NODE_EXPORTER_JOB
from sparkrack.stackspec import StrictModel
from sparkrack.stackspec.roles import RoleName
from sparkrack.transport.openssh import Tokens, host_block
from sparkrack.transport.target import Target


class Inventory(StrictModel):
    plan: Plan
    roles: tuple[RoleName, ...]  # whose work is checked: checks of another role skip
    # node -> why it cannot be checked this run (no answer, a host key not pinned): its checks
    # are not collected, and `sparkrack verify` reports the node once instead.
    unavailable: dict[str, str] = Field(default_factory=dict)
    # The engine image's id as the deploy made it on the head (the Image resource's output):
    # what every node's image must be. None when not handed (a Plan file alone): the head's.
    engine_image_id: str | None = None

    @property
    def stack(self) -> str:
        return self.plan.stack

    @property
    def digest(self) -> str:
        return self.plan.digest()

    @property
    def nodes(self) -> tuple[NodePlan, ...]:
        return self.plan.nodes

    def node(self, name: str) -> NodePlan:
        return self.plan.node(name)


def build_inventory(
    plan: Plan, roles: Collection[str] | None = None, engine_image_id: str | None = None
) -> Inventory:
    """The Plan with the roles it deploys, or only `roles` of them (an operator's narrower look),
    and the engine image id the deploy made, when known."""
    checked = plan.deploys if roles is None else tuple(r for r in plan.deploys if r in roles)
    return Inventory(plan=plan, roles=checked, engine_image_id=engine_image_id or None)


def service_user(plan: Plan) -> str:
    """Whose rootless Podman holds every container."""
    return plan.roles.base.service_user.name


def cabled_rdma_devices(node: NodePlan) -> dict[str, str]:
    """Every RDMA device behind a cabled port -> the netdev its RoCE GIDs belong to."""
    return {link.rdma_device: link.netdev for link in node.links if link.rdma_device}


def connected_network(link: LinkPlan) -> str | None:
    """The connected route's destination: the address's network, or with DHCP the rail's /24
    the lease must fall in; None with DHCP and no fabric.subnet declared."""
    if link.address:
        return str(ipaddress.ip_interface(link.address).network)
    return link.network


def node_exporter(plan: Plan, node: NodePlan) -> str | None:
    """host:port of the node's node-exporter target, None when the Plan scrapes none there."""
    targets = plan.monitoring.targets
    found = (t.target for t in targets if t.node == node.name and t.job == NODE_EXPORTER_JOB)
    return next(found, None)


def planned_collectors(plan: Plan) -> tuple[str, ...]:
    """The collectors node-exporter is started with (its defaults are off)."""
    return tuple(
        arg.removeprefix("--collector.")
        for arg in plan.monitoring.node_exporter_args
        if arg.startswith("--collector.") and arg != "--collector.disable-defaults"
    )


def scrape_settle_s(plan: Plan) -> float:
    """A target started a moment ago reads down until Prometheus scrapes it next: one interval
    plus one timeout at most."""
    return plan.monitoring.scrape_interval_s + plan.monitoring.scrape_timeout_s


def rdma_file_stale_s(plan: Plan) -> float:
    """A running RDMA collector's file is at most one write old when scraped, and that scrape at
    most an interval and its timeout old when read; twice the write, for a busy node."""
    return 2 * plan.monitoring.rdma_interval_s + scrape_settle_s(plan)


def ssh_config(inventory: Inventory, control_dir: Path) -> str:
    """OpenSSH config for the `ssh://` backend: pinned known_hosts, one master per node."""
    return "".join(ssh_block(Target.for_node(node), control_dir) for node in inventory.nodes)


def ssh_block(target: Target, control_dir: Path) -> str:
    return host_block(
        [target.node],
        [
            ("HostName", target.host),
            ("Port", target.port),
            ("User", target.user),
            ("IdentityFile", target.key_path),
            ("IdentitiesOnly", "yes"),
            ("UserKnownHostsFile", target.known_hosts),
            ("StrictHostKeyChecking", "yes"),
            ("BatchMode", "yes"),
            ("ConnectTimeout", 10),
            ("ControlMaster", "auto"),
            ("ControlPath", Tokens(f"{control_dir}/%C")),  # %C: OpenSSH's connection hash
            ("ControlPersist", "15s"),
            ("LogLevel", "ERROR"),
        ],
    )

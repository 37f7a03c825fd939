"""The Plan's verification view: what every check expects, as JSON, derived from the Plan only.

One exception to "the Plan only": `roles` lists the roles this build can deploy (a
`roles/<name>/role.py` exists), so that checks of a role nobody deploys yet skip, and say so,
instead of failing on a node nothing configured.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path

from pydantic import Field

from sparkrack.openssh import Tokens, host_block
from sparkrack.plan import NodePlan, Plan
from sparkrack.plan.engine import API_CONTAINER, HEAD_CONTAINER, engine_containers
from sparkrack.plan.fence import Fence
from sparkrack.plan.listeners import Listener
from sparkrack.plan.nccl import ROCE_V2_GID_INDEX
from sparkrack.spec import StrictModel

ROLES = ("base", "fabric", "cpu_pinning", "podman", "inference", "monitoring")
# Seed 001: node-exporter hung under RDMA load with these.
FORBIDDEN_COLLECTORS = ("infiniband", "cpufreq")
SCRAPE_LIMIT_S = 1.0


class SshView(StrictModel):
    host: str
    port: int
    user: str
    key: str
    known_hosts: str


class LinkView(StrictModel):
    netdev: str
    mtu: int
    addressing: str
    address: str | None  # CIDR; None with DHCP
    network: str | None  # the connected route's destination
    peer: str


class RdmaView(StrictModel):
    devices: tuple[str, ...]  # every RDMA device behind a cabled port
    netdevs: dict[str, str]  # device -> the netdev its RoCE GIDs belong to
    port_state: str = "ACTIVE"
    gid_index: int = int(ROCE_V2_GID_INDEX)
    gid_type: str = "RoCE v2"


class CpuView(StrictModel):
    pinning: bool
    housekeeping: str
    compute: str
    irqbalance_banned: str  # "" when irqbalance may use every core
    nic_irqs: str  # the driver whose IRQs must be on housekeeping, "none" where none are raised


class ContainerView(StrictModel):
    name: str
    image: str
    env: dict[str, str]
    cpuset: str | None  # None: not pinned
    devices: tuple[str, ...] = ()  # CDI names and device paths, as `podman run --device` takes
    network: str = "host"


class PodmanView(StrictModel):
    service_user: str
    memlock_limit: int | None  # None: unlimited
    image: str
    containers: tuple[ContainerView, ...]


class NodeView(StrictModel):
    name: str
    role: str
    hardware: str  # the profile's name, which declares the GPUs and how containers get them
    gpus: int  # what each engine container must see
    gpu_access: str  # "cdi", or "none" where the profile declares no GPU (simulated)
    ssh: SshView
    links: tuple[LinkView, ...]
    sysctls: dict[str, str]  # the fabric's kernel settings (ARP answered on the owning port)
    rdma: RdmaView
    cpu: CpuView
    podman: PodmanView
    nccl_hcas: tuple[str, ...]  # what the NCCL "NET/IB : Using" line must name
    node_exporter: str | None  # host:port
    listeners: tuple[Listener, ...]  # of the deployed roles: each on its planned address
    ray_fence: Fence  # Ray's every-address ports, answered on the planned address only


class CableView(StrictModel):
    from_node: str
    from_netdev: str
    to_node: str
    to_netdev: str
    to_address: str | None  # None with DHCP: read on the peer
    payload_bytes: int
    crossed: bool


class InferenceView(StrictModel):
    api_node: str
    address: str  # the API's: the head's management address
    port: int
    served_model_name: str
    ray_nodes: int
    ray_container: str  # where `ray status` runs
    container: str  # vLLM's: its log holds every rank's NCCL lines


class TargetView(StrictModel):
    job: str
    node: str
    target: str
    metrics_path: str


class MonitoringView(StrictModel):
    enabled: bool
    prometheus_node: str
    prometheus_address: str  # that node's management address, the only one it listens on
    prometheus_port: int
    targets: tuple[TargetView, ...]
    # A target started a moment ago reads down until Prometheus scrapes it next: one interval
    # plus one timeout at most.
    scrape_settle_s: float = 0.0
    collectors: tuple[str, ...]
    forbidden_collectors: tuple[str, ...] = FORBIDDEN_COLLECTORS
    scrape_limit_s: float = SCRAPE_LIMIT_S


class Inventory(StrictModel):
    stack: str
    digest: str
    head_node: str
    roles: tuple[str, ...]  # the roles this build deploys
    nodes: tuple[NodeView, ...]
    cables: tuple[CableView, ...]
    inference: InferenceView
    monitoring: MonitoringView
    # node -> why it cannot be checked this run (no answer, a host key not pinned): its checks
    # are not collected, and `sparkrack verify` reports the node once instead.
    unavailable: dict[str, str] = Field(default_factory=dict)

    def node(self, name: str) -> NodeView:
        return next(node for node in self.nodes if node.name == name)


def build_inventory(plan: Plan, roles: tuple[str, ...] | None = None) -> Inventory:
    return Inventory(
        stack=plan.stack,
        digest=plan.digest(),
        head_node=plan.head_node,
        roles=deployable_roles() if roles is None else roles,
        nodes=tuple(node_view(plan, node) for node in plan.nodes),
        cables=tuple(CableView(**ping.model_dump()) for ping in plan.jumbo_pings),
        inference=InferenceView(
            api_node=plan.serving.api_node,
            address=plan.serving.address,
            port=plan.serving.port,
            served_model_name=plan.serving.served_model_name,
            ray_nodes=len(plan.nodes),
            ray_container=HEAD_CONTAINER,
            container=API_CONTAINER,
        ),
        monitoring=MonitoringView(
            enabled=plan.monitoring.enabled,
            prometheus_node=plan.monitoring.prometheus_node,
            prometheus_address=plan.node(plan.monitoring.prometheus_node).address,
            prometheus_port=plan.monitoring.prometheus_port,
            targets=tuple(TargetView(**t.model_dump()) for t in plan.monitoring.targets),
            scrape_settle_s=plan.monitoring.scrape_interval_s + plan.monitoring.scrape_timeout_s,
            collectors=tuple(
                arg.removeprefix("--collector.")
                for arg in plan.monitoring.node_exporter_args
                if arg.startswith("--collector.") and arg != "--collector.disable-defaults"
            ),
        ),
    )


def node_view(plan: Plan, node: NodePlan) -> NodeView:
    exporter = [
        t.target
        for t in plan.monitoring.targets
        if t.node == node.name and t.job == "node-exporter"
    ]
    return NodeView(
        name=node.name,
        role=node.role,
        hardware=node.hardware,
        gpus=node.gpus,
        gpu_access=node.gpu_access.kind,
        ssh=SshView(
            host=node.address,
            port=node.ssh_port,
            user=node.ssh_user,
            key=str(Path(node.ssh_key_path).expanduser()),
            known_hosts=str(Path(node.ssh_known_hosts).expanduser()),
        ),
        links=tuple(
            LinkView(
                netdev=link.netdev,
                mtu=link.mtu,
                addressing=link.addressing,
                address=link.address,
                network=str(ipaddress.ip_interface(link.address).network) if link.address else None,
                peer=link.peer,
            )
            for link in node.links
        ),
        sysctls=node.sysctls,
        rdma=RdmaView(
            devices=tuple(link.rdma_device for link in node.links if link.rdma_device),
            netdevs={link.rdma_device: link.netdev for link in node.links if link.rdma_device},
        ),
        cpu=CpuView(
            pinning=node.cpus.pinning,
            housekeeping=node.cpus.housekeeping,
            compute=node.cpus.compute,
            irqbalance_banned=node.cpus.irqbalance_banned,
            nic_irqs=node.cpus.nic_irqs,
        ),
        podman=PodmanView(
            service_user=plan.roles.base.service_user.name,
            memlock_limit=node.memlock_limit,
            image=plan.serving.image,
            containers=tuple(
                ContainerView(
                    name=container.name,
                    image=container.image,
                    env=container.env,
                    cpuset=container.cpuset or None,
                    devices=container.devices,
                )
                for container in engine_containers(plan, node)
            ),
        ),
        nccl_hcas=node.rdma_devices,
        node_exporter=next(iter(exporter), None),
        listeners=tuple(node.listeners),
        ray_fence=node.ray_fence,
    )


def roles_dir() -> Path:
    import roles

    return Path(roles.__file__).parent


def deployable_roles() -> tuple[str, ...]:
    """The roles with a role.py in this build, in deployment order."""
    root = roles_dir()
    return tuple(name for name in ROLES if (root / name / "role.py").is_file())


def ssh_config(inventory: Inventory, control_dir: Path) -> str:
    """OpenSSH config for the `ssh://` backend: pinned known_hosts, one master per node."""
    return "".join(
        host_block(
            [node.name],
            [
                ("HostName", node.ssh.host),
                ("Port", node.ssh.port),
                ("User", node.ssh.user),
                ("IdentityFile", node.ssh.key),
                ("IdentitiesOnly", "yes"),
                ("UserKnownHostsFile", node.ssh.known_hosts),
                ("StrictHostKeyChecking", "yes"),
                ("BatchMode", "yes"),
                ("ConnectTimeout", 10),
                ("ControlMaster", "auto"),
                ("ControlPath", Tokens(f"{control_dir}/%C")),  # %C: OpenSSH's connection hash
                ("ControlPersist", "15s"),
                ("LogLevel", "ERROR"),
            ],
        )
        for node in inventory.nodes
    )

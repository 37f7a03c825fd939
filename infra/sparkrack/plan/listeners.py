"""Where each node's services listen, as planned: its management address, never a wildcard
(on a real box that would be the fabric and any office LAN on a spare port, and a reachable Ray
API runs arbitrary code). Two services of one node on the same port would leave one of them dead
at start, so such a stack is refused before any node. Verification compares each node's
listening sockets with these. Ray's ports are fixed here too (RAY_FIXED_PORTS says why).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from typing import NamedTuple

from sparkrack.plan.parallel import RAY_PORT
from sparkrack.stackspec import ClusterSpec, NodeSpec, StrictModel
from sparkrack.stackspec.errors import Problem, SpecError
from sparkrack.text.addresses import host_port

# `ray start` flag -> port, on every node: all of Ray's servers on ports of the Plan's choosing.
# The agents' own choice made a loaded node miss Ray's start-up deadline (ray-project/ray#65983),
# and fixed ports let verification (and a firewall) name them. Ray's own default for the first;
# the rest beside it, clear of the monitoring ports (8000, 8080, 9090, 9100, 9835).
RAY_FIXED_PORTS = {
    "--dashboard-agent-listen-port": 52365,
    "--dashboard-agent-grpc-port": 52366,
    "--runtime-env-agent-port": 52367,
    "--metrics-export-port": 52368,
    "--node-manager-port": 52369,
    "--object-manager-port": 52370,
}
# Ray's workers (vLLM's among them) each take one port of this range.
RAY_WORKER_PORTS = (52400, 52599)
# The servers this Ray binds on every address, whatever --node-ip-address says (2.54.1, and still
# 2.55.1 and 2.60.0, tried: ray-project/ray#59852 has not reached a release's servers). Declared
# here, so that verification fails on any other wildcard listener; the node's fence
# (plan/fence.py) answers these on the planned address only.
RAY_EVERYWHERE = frozenset(
    {"ray-gcs", "ray--node-manager-port", "ray--object-manager-port", "ray-workers"}
)
# Ray's that listen once Ray runs (the agents start only with the parts they serve).
RAY_ALWAYS = frozenset({"ray-gcs", "ray--node-manager-port", "ray--object-manager-port"})


class Service(NamedTuple):
    key: str  # how the roles ask for it: NodePlan.listener(key)
    field: str | None  # the stack field that sets its port; None: fixed here
    what: str  # in a message

    @property
    def role(self) -> str:
        """The role that starts it: the engine's (Ray, the API) or the monitoring one."""
        return "inference" if self.key.startswith("ray") or self.key == "api" else "monitoring"


def node_services(spec: ClusterSpec, head: str, node: str) -> Iterator[tuple[Service, int]]:
    """Every listener the plan puts on `node`, with its (first) port."""
    for flag, port in RAY_FIXED_PORTS.items():
        yield Service(f"ray{flag}", None, f"Ray's {flag}"), port
    yield Service("ray-workers", None, "Ray's workers"), RAY_WORKER_PORTS[0]
    if node == head:
        yield Service("ray-gcs", None, "Ray's GCS"), RAY_PORT
        yield Service("api", "serving.port", "the API"), spec.serving.port
    monitoring = spec.monitoring
    if not monitoring.enabled:
        return
    yield (
        Service("node-exporter", "monitoring.node_exporter_port", "node-exporter"),
        (monitoring.node_exporter_port),
    )
    yield (
        Service("gpu-exporter", "monitoring.gpu_exporter_port", "the GPU exporter"),
        (monitoring.gpu_exporter_port),
    )
    yield Service("cadvisor", "monitoring.cadvisor_port", "cAdvisor"), monitoring.cadvisor_port
    if node == head:
        yield (
            Service("prometheus", "monitoring.prometheus_port", "Prometheus"),
            (monitoring.prometheus_port),
        )
        if monitoring.grafana_image:
            yield Service("grafana", "monitoring.grafana_port", "Grafana"), monitoring.grafana_port


def last_port(key: str, port: int) -> int:
    return RAY_WORKER_PORTS[1] if key == "ray-workers" else port


def port_clashes(spec: ClusterSpec, head: str) -> list[Problem]:
    """One problem per port that two planned services of one node share, at the stack field that
    set the later one (Ray's own ports are fixed, so a clash always involves a field)."""
    problems = []
    for node in spec.nodes:
        users: dict[int, list[Service]] = defaultdict(list)
        for service, port in node_services(spec, head, node.name):
            for each in range(port, last_port(service.key, port) + 1):
                users[each].append(service)
        for port, services in sorted(users.items()):
            if len(services) > 1:
                field = next(s.field for s in reversed(services) if s.field is not None)
                names = " and ".join(s.what for s in services)
                problems.append(
                    Problem(field, f"port {port} would serve both {names}: move one", node.name)
                )
    return problems


def refuse_port_clashes(spec: ClusterSpec, head: str) -> None:
    if problems := port_clashes(spec, head):
        raise SpecError(spec.stack, problems)


class Listener(StrictModel):
    """One planned listening socket: which service (its key and, for people, what it is), on
    which address and port."""

    key: str
    service: str
    role: str  # the role that starts it
    address: str
    port: int
    last_port: int  # the same port, or the end of a range (Ray's workers)
    everywhere: bool  # bound on every address by the software itself (RAY_EVERYWHERE)
    always: bool  # listening whenever its role runs (else only when a part of it is used)

    def holds(self, address: str, port: int) -> bool:
        """Whether a socket on `address:port` is this one (a wildcard is, if it binds there)."""
        where = address == self.address or (self.everywhere and address in WILDCARDS)
        return where and self.port <= port <= self.last_port

    @property
    def host_port(self) -> str:
        """`address:port`, as every listen flag takes it."""
        return host_port(self.address, self.port)


WILDCARDS = frozenset({"0.0.0.0", "::", "*"})  # as `ss` shows an address bound to every one


def node_listeners(spec: ClusterSpec, head: str, node: NodeSpec) -> tuple[Listener, ...]:
    """Every service of the node on its management address; the Ray servers of RAY_EVERYWHERE
    on every address too, as this Ray binds them."""
    return tuple(
        Listener(
            key=service.key,
            service=service.what,
            role=service.role,
            address=node.address,
            port=port,
            last_port=last_port(service.key, port),
            everywhere=service.key in RAY_EVERYWHERE,
            always=not service.key.startswith("ray") or service.key in RAY_ALWAYS,
        )
        for service, port in node_services(spec, head, node.name)
    )

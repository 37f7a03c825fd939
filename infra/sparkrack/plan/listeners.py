"""The TCP ports each node's services listen on, as planned: two services of one node on the
same port would leave one of them dead at start, so such a stack is refused before any node.

Ray's ports are fixed here (not left to Ray): its agents on ports of their own choosing made a
loaded node miss Ray's start-up deadline (ray-project/ray#65983), and fixed ports let a check or
a firewall name them.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator

from sparkrack.errors import Problem, SpecError
from sparkrack.plan.parallel import RAY_PORT
from sparkrack.spec import ClusterSpec

# `ray start` flag -> port, on every node. Ray's own default for the listen port; the rest beside
# it, clear of the monitoring ports (8000, 8080, 9090, 9100, 9835).
RAY_AGENT_PORTS = {
    "--dashboard-agent-listen-port": 52365,
    "--dashboard-agent-grpc-port": 52366,
    "--runtime-env-agent-port": 52367,
    "--metrics-export-port": 52368,
}


# (field that sets the port, or None for one fixed here; what listens)
Service = tuple[str | None, str]


def node_services(spec: ClusterSpec, head: str, node: str) -> Iterator[tuple[Service, int]]:
    """Every listener the plan puts on `node`, with its port."""
    yield from (((None, f"Ray's {flag}"), port) for flag, port in RAY_AGENT_PORTS.items())
    if node == head:
        yield (None, "Ray's GCS"), RAY_PORT
        yield ("serving.port", "the API"), spec.serving.port
    monitoring = spec.monitoring
    if not monitoring.enabled:
        return
    yield ("monitoring.node_exporter_port", "node-exporter"), monitoring.node_exporter_port
    yield ("monitoring.gpu_exporter_port", "the GPU exporter"), monitoring.gpu_exporter_port
    yield ("monitoring.cadvisor_port", "cAdvisor"), monitoring.cadvisor_port
    if node == head:
        yield ("monitoring.prometheus_port", "Prometheus"), monitoring.prometheus_port
        if monitoring.grafana_image:
            yield ("monitoring.grafana_port", "Grafana"), monitoring.grafana_port


def port_clashes(spec: ClusterSpec, head: str) -> list[Problem]:
    """One problem per port that two planned services of one node share, at the stack field that
    set the later one (Ray's own ports are fixed, so a clash always involves a field)."""
    problems = []
    for node in spec.nodes:
        users: dict[int, list[Service]] = defaultdict(list)
        for service, port in node_services(spec, head, node.name):
            users[port].append(service)
        for port, services in sorted(users.items()):
            if len(services) > 1:
                field = next(f for f, _ in reversed(services) if f is not None)
                names = " and ".join(what for _, what in services)
                problems.append(
                    Problem(field, f"port {port} would serve both {names}: move one", node.name)
                )
    return problems


def refuse_port_clashes(spec: ClusterSpec, head: str) -> None:
    if problems := port_clashes(spec, head):
        raise SpecError(spec.stack, problems)

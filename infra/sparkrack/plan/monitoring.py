"""What Prometheus scrapes: vLLM on the head, and node-exporter, the nvidia-smi exporter and
cAdvisor on every node: 1 + 3 x N targets (7 for two nodes, as in seed 001)."""

from __future__ import annotations

from sparkrack.spec import ClusterSpec, StrictModel


class ScrapeTarget(StrictModel):
    job: str
    node: str
    target: str  # host:port
    metrics_path: str = "/metrics"


class MonitoringPlan(StrictModel):
    enabled: bool
    prometheus_node: str
    prometheus_port: int
    grafana_port: int
    scrape_interval_s: int
    targets: tuple[ScrapeTarget, ...]
    # node-exporter: defaults off, a named minimal set on (seed 001: infiniband, cpufreq hung it).
    node_exporter_args: tuple[str, ...]
    # RoCE bypasses node_network_*: these sysfs counters (in 4-byte words) show fabric traffic.
    rdma_counters: dict[str, tuple[str, ...]]


def plan_monitoring(spec: ClusterSpec, rdma_devices: dict[str, tuple[str, ...]]) -> MonitoringPlan:
    options = spec.monitoring
    head = spec.nodes[0]
    targets = [
        ScrapeTarget(job="vllm", node=head.name, target=f"{head.address}:{spec.serving.port}")
    ]
    per_node = (
        ("node-exporter", options.node_exporter_port),
        ("nvidia-gpu", options.gpu_exporter_port),
        ("cadvisor", options.cadvisor_port),
    )
    targets += [
        ScrapeTarget(job=job, node=node.name, target=f"{node.address}:{port}")
        for node in spec.nodes
        for job, port in per_node
    ]
    return MonitoringPlan(
        enabled=options.enabled,
        prometheus_node=head.name,
        prometheus_port=options.prometheus_port,
        grafana_port=options.grafana_port,
        scrape_interval_s=options.scrape_interval_s,
        targets=tuple(targets) if options.enabled else (),
        node_exporter_args=(
            "--collector.disable-defaults",
            *(f"--collector.{name}" for name in options.node_exporter_collectors),
        ),
        rdma_counters={
            node: tuple(
                f"/sys/class/infiniband/{device}/ports/1/counters/port_{direction}_data"
                for device in devices
                for direction in ("xmit", "rcv")
            )
            for node, devices in rdma_devices.items()
        },
    )

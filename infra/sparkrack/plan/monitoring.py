"""What Prometheus scrapes: vLLM on the head, and node-exporter, the nvidia-smi exporter and
cAdvisor on every node: 1 + 3 x N targets (7 for two nodes, as in seed 001)."""

from __future__ import annotations

from typing import Literal

from sparkrack.stackspec import AlertThresholds, ClusterSpec, StrictModel, TariffSpec
from sparkrack.text.addresses import host_port

NODE_EXPORTER_JOB = "node-exporter"  # its scrape job: the targets, and what verification asks of it


class ScrapeTarget(StrictModel):
    job: str
    node: str
    target: str  # host:port
    metrics_path: str = "/metrics"


# The RDMA collector's write interval: a counter file older than a few of these is a collector
# that stopped, whose last values node-exporter keeps serving as if current.
RDMA_INTERVAL_S = 5


class MonitoringPlan(StrictModel):
    enabled: bool
    prometheus_node: str
    prometheus_port: int
    grafana_port: int
    scrape_interval_s: int
    scrape_timeout_s: float  # below the interval
    targets: tuple[ScrapeTarget, ...]
    # node-exporter: defaults off, a named minimal set on (seed 001: infiniband, cpufreq hung it).
    node_exporter_args: tuple[str, ...]
    # RoCE bypasses node_network_*: these sysfs counters (in 4-byte words) show fabric traffic.
    rdma_counters: dict[str, tuple[str, ...]]
    rdma_interval_s: int = RDMA_INTERVAL_S  # how often the collector writes them
    alerts: AlertThresholds
    tariff: TariffSpec | None
    gpu_memory_from: Literal["meminfo", "nvidia-smi"]
    # At the wall, from each node's hardware profile: no GB10 has a wall-power sensor.
    assumed_power_watts: dict[str, float]
    # The monitoring role's images and where the head gets them (MonitoringSpec).
    exporters_image: str
    prometheus_image: str
    grafana_image: str | None
    image_source: Literal["build", "present", "control"]


def plan_monitoring(spec: ClusterSpec, rdma_devices: dict[str, tuple[str, ...]]) -> MonitoringPlan:
    options = spec.monitoring
    head = spec.nodes[0]
    targets = [
        ScrapeTarget(job="vllm", node=head.name, target=host_port(head.address, spec.serving.port))
    ]
    per_node = (
        (NODE_EXPORTER_JOB, options.node_exporter_port),
        ("nvidia-gpu", options.gpu_exporter_port),
        ("cadvisor", options.cadvisor_port),
    )
    targets += [
        ScrapeTarget(job=job, node=node.name, target=host_port(node.address, port))
        for node in spec.nodes
        for job, port in per_node
    ]
    return MonitoringPlan(
        enabled=options.enabled,
        prometheus_node=head.name,
        prometheus_port=options.prometheus_port,
        grafana_port=options.grafana_port,
        scrape_interval_s=options.scrape_interval_s,
        scrape_timeout_s=options.scrape_timeout_s or round(options.scrape_interval_s * 2 / 3, 3),
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
        alerts=options.alerts,
        tariff=options.tariff,
        gpu_memory_from=options.gpu_memory_from,
        assumed_power_watts={
            node.name: spec.hardware(node).assumed_power_watts for node in spec.nodes
        },
        exporters_image=options.exporters_image,
        prometheus_image=options.prometheus_image,
        grafana_image=options.grafana_image,
        image_source=options.image_source,
    )

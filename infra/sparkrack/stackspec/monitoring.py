"""Monitoring and CPU pinning: exporters, Prometheus, Grafana, alerts, the tariff."""

from __future__ import annotations

from typing import Literal

from pydantic import (
    Field,
    field_validator,
    model_validator,
)

from sparkrack.stackspec.base import Port, StrictModel
from sparkrack.text.spectext import (
    ImageReference,
    OneLine,
    ShortName,
)

HANGING_COLLECTORS = {
    "infiniband": "hangs node-exporter under RDMA load (seed 001); RDMA counters are read from "
    "/sys/class/infiniband instead",
    "cpufreq": "hung node-exporter scrapes on a GB10 under load (seed 001)",
}


class AlertThresholds(StrictModel):
    kv_cache_near_full: float = Field(default=0.9, gt=0, le=1, description="vLLM KV cache share")
    # The verification suite's scrape limit: seed 001's healthy node-exporter answered in ~5 ms.
    node_exporter_slow_s: float = Field(default=1.0, gt=0)


class TariffSpec(StrictModel):
    """Electricity price, for the dashboard's energy cost (seed 001: 1.04 zł/kWh, Kraków G11)."""

    per_kwh: float = Field(gt=0)
    currency: OneLine


class MonitoringSpec(StrictModel):
    enabled: bool = True
    scrape_interval_s: int = Field(default=15, ge=1)
    # Below the interval, so a stuck exporter shows as down rather than piling up scrapes
    # (seed 001). None: two thirds of the interval.
    scrape_timeout_s: float | None = Field(default=None, gt=0)
    alerts: AlertThresholds = AlertThresholds()
    tariff: TariffSpec | None = None
    # Unified memory (GB10) leaves nvidia-smi's memory fields [N/A]: read /proc/meminfo instead.
    gpu_memory_from: Literal["meminfo", "nvidia-smi"] = "meminfo"
    prometheus_port: Port = 9090
    grafana_port: Port = 3000
    node_exporter_port: Port = 9100
    gpu_exporter_port: Port = 9835
    cadvisor_port: Port = 8080
    # The monitoring role's images (roles/monitoring): node-exporter, cAdvisor and sparkrack's GPU
    # and RDMA collectors in one; Prometheus in another; Grafana only where one is named.
    exporters_image: ImageReference = "localhost/sparkrack/exporters:latest"
    prometheus_image: ImageReference = "localhost/sparkrack/prometheus:latest"
    grafana_image: ImageReference | None = None
    # Where the head gets them, as serving.engine.source says for the engine: `build` (the
    # exporters and Prometheus from roles/monitoring/templates; Grafana must be `present`),
    # `present`, or `control`. The other nodes get the exporters from the head over the fabric.
    image_source: Literal["build", "present", "control"] = "present"
    node_exporter_collectors: tuple[ShortName, ...] = (
        "cpu",
        "diskstats",
        "filesystem",
        "hwmon",
        "loadavg",
        "meminfo",
        "netdev",
        "pressure",
        "stat",
        "textfile",  # the RDMA counters and the NCCL transport, written by rdma_textfile.py
        "time",
        "uname",
    )

    @field_validator("node_exporter_collectors")
    @classmethod
    def _no_hanging_collectors(cls, collectors: tuple[str, ...]) -> tuple[str, ...]:
        for name in collectors:
            if name in HANGING_COLLECTORS:
                raise ValueError(f"collector {name!r} {HANGING_COLLECTORS[name]}")
        return collectors

    @model_validator(mode="after")
    def _timeout_below_interval(self) -> MonitoringSpec:
        if self.scrape_timeout_s is not None and self.scrape_timeout_s >= self.scrape_interval_s:
            raise ValueError(
                f"scrape_timeout_s {self.scrape_timeout_s:g} must be below scrape_interval_s"
                f" {self.scrape_interval_s}: slow scrapes would pile up (seed 001)"
            )
        return self


class CpuPinningSpec(StrictModel):
    """Housekeeping (IRQs, exporters) on efficiency cores, inference on performance cores: IRQs on
    the compute cores took a GB10 from 20 tok/s to 4 (seed 000)."""

    enabled: bool = True
    move_irqs: bool = True

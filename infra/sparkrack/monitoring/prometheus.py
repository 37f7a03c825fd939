"""Prometheus configuration and alert rules, generated from the Plan.

One scrape job per exporter kind and one static config per target, each labelled with the node it
runs on: dashboards filter on `node`, and the verification suite matches (job, instance) against
the Plan's targets. The scrape timeout stays below the interval so a stuck exporter reads as down
instead of piling up requests (seed 001's node-exporter hit its 40-request limit that way).
"""

from __future__ import annotations

from typing import Any

import yaml

from sparkrack.plan import Plan
from sparkrack.plan.monitoring import MonitoringPlan

PROMETHEUS_CONFIG_DIR = "/etc/prometheus"
CONFIG_FILE = "prometheus.yml"
RULES_FILE = "rules/sparkrack.rules.yml"
# Relative to the config file, i.e. /etc/prometheus/rules/ in the container; relative also lets
# `promtool check config` run on a copy in a scratch directory.
RULE_FILES_GLOB = "rules/*.yml"


def prometheus_files(plan: Plan) -> dict[str, str]:
    """Relative path under PROMETHEUS_CONFIG_DIR -> file content."""
    return {
        CONFIG_FILE: dump(prometheus_config(plan.monitoring)),
        RULES_FILE: dump(alert_rules(plan.monitoring)),
    }


def dump(document: dict[str, Any]) -> str:
    text: str = yaml.safe_dump(document, sort_keys=False, default_flow_style=False)
    return text


def duration(seconds: float) -> str:
    """Prometheus duration syntax: whole seconds as `15s`, anything finer in milliseconds."""
    millis = round(seconds * 1000)
    return f"{millis // 1000}s" if millis % 1000 == 0 else f"{millis}ms"


def prometheus_config(monitoring: MonitoringPlan) -> dict[str, Any]:
    jobs: dict[str, list[dict[str, Any]]] = {}
    for target in monitoring.targets:
        jobs.setdefault(target.job, []).append(
            {
                "targets": [target.target],
                "labels": {"instance": target.target, "job": target.job, "node": target.node},
            }
        )
    paths = {target.job: target.metrics_path for target in monitoring.targets}
    return {
        "global": {
            "scrape_interval": duration(monitoring.scrape_interval_s),
            "scrape_timeout": duration(monitoring.scrape_timeout_s),
            "evaluation_interval": duration(monitoring.scrape_interval_s),
        },
        "rule_files": [RULE_FILES_GLOB],
        "scrape_configs": [
            {"job_name": job, "metrics_path": paths[job], "static_configs": static_configs}
            for job, static_configs in jobs.items()
        ],
    }


def alert(name: str, expr: str, wait: str, severity: str, summary: str) -> dict[str, Any]:
    rule: dict[str, Any] = {"alert": name, "expr": expr}
    if wait != "0s":
        rule["for"] = wait
    rule["labels"] = {"severity": severity}
    rule["annotations"] = {"summary": summary}
    return rule


def alert_rules(monitoring: MonitoringPlan) -> dict[str, Any]:
    thresholds = monitoring.alerts
    rules = [
        alert(
            "VLLMDown",
            'up{job="vllm"} == 0',
            "1m",
            "critical",
            "vLLM on {{ $labels.node }} ({{ $labels.instance }}) does not answer /metrics",
        ),
        alert(
            "TargetDown",
            'up{job!="vllm"} == 0',
            "2m",
            "warning",
            "{{ $labels.job }} on {{ $labels.node }} ({{ $labels.instance }}) is down",
        ),
        alert(
            "RdmaPortDown",
            "sparkrack_rdma_port_up == 0",
            "1m",
            "critical",
            "RDMA {{ $labels.device }} port {{ $labels.port }} ({{ $labels.netdev }})"
            " on {{ $labels.node }} is not ACTIVE",
        ),
        alert(
            "NcclSocketFallback",
            "sparkrack_nccl_socket_fallback == 1",
            "0s",
            "critical",
            "NCCL on {{ $labels.node }} runs over NET/Socket, not RoCE: decode is far slower",
        ),
        alert(
            "NodeExporterSlow",
            f'scrape_duration_seconds{{job="node-exporter"}} > {thresholds.node_exporter_slow_s:g}',
            "5m",
            "warning",
            "node-exporter on {{ $labels.node }} takes {{ $value | humanizeDuration }} a scrape;"
            " a collector may be hanging (seed 001: infiniband, cpufreq)",
        ),
        alert(
            "KVCacheNearFull",
            f"vllm:kv_cache_usage_perc > {thresholds.kv_cache_near_full:g}",
            "5m",
            "warning",
            "vLLM KV cache on {{ $labels.node }} is {{ $value | humanizePercentage }} full:"
            " requests will queue or be preempted",
        ),
    ]
    return {"groups": [{"name": "sparkrack", "rules": rules}]}

"""The generated Grafana provisioning and dashboard: the JSON is what Grafana expects (rows
collapsed but the overview, the panels of the open row at the top level, a `node` variable, a
datasource and a query on every panel), and the panels say what seed 001 learnt."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
import yaml

from sparkrack.monitoring.dashboard_check import (
    Json,
    dashboard_problems,
    panels,
    queries,
    rows,
    shows_idle,
)
from sparkrack.monitoring.grafana import DATASOURCE_UID, GRAFANA_DASHBOARDS_DIR, grafana_files
from sparkrack.plan import Plan

from .support import cluster, plan_of

DASHBOARD = "dashboards/sparkrack.json"


def plan(stack: str = "sim-2", **monitoring: Any) -> Plan:
    raw = cluster(stack)
    raw.setdefault("monitoring", {}).update(monitoring)
    return plan_of(stack, raw)


def dashboard(of: Plan | None = None) -> Json:
    loaded: Json = json.loads(grafana_files(of or plan())[DASHBOARD])
    return loaded


def panel(board: Json, title: str) -> Json:
    return next(p for p in panels(board) if p["title"] == title)


def exprs(board: Json, title: str) -> list[str]:
    return [target["expr"] for target in panel(board, title)["targets"]]


def test_the_files_grafana_provisions() -> None:
    assert set(grafana_files(plan())) == {
        "provisioning/datasources/sparkrack.yaml",
        "provisioning/dashboards/sparkrack.yaml",
        DASHBOARD,
    }


def test_datasource_is_the_heads_prometheus_on_its_management_address() -> None:
    of = plan()
    files = grafana_files(of)
    source = yaml.safe_load(files["provisioning/datasources/sparkrack.yaml"])["datasources"][0]
    head = of.node(of.monitoring.prometheus_node)
    assert source["url"] == f"http://{head.address}:{of.monitoring.prometheus_port}"
    assert (source["uid"], source["type"], source["access"]) == (
        DATASOURCE_UID,
        "prometheus",
        "proxy",
    )
    provider = yaml.safe_load(files["provisioning/dashboards/sparkrack.yaml"])["providers"][0]
    assert provider["options"]["path"] == GRAFANA_DASHBOARDS_DIR


@pytest.mark.parametrize("stack", ["sim-2", "sim-16", "gb10-2", "gb10-16", "h200-2"])
def test_generated_dashboard_has_no_problems(stack: str) -> None:
    assert dashboard_problems(dashboard(plan(stack))) == []


def test_only_the_overview_row_is_open_and_its_panels_follow_it() -> None:
    board = dashboard()
    found = rows(board)
    assert found[0]["title"] == "Overview" and found[0]["collapsed"] is False
    assert found[0]["panels"] == []
    assert all(row["collapsed"] is True and row["panels"] for row in found[1:])
    top = board["panels"]
    assert top[0]["type"] == "row" and top[1]["title"] == "Throughput (tok/s)"


def test_node_variable_lists_every_node() -> None:
    variable = dashboard()["templating"]["list"][0]
    assert variable["name"] == "node"
    assert variable["query"] == "label_values(up, node)"
    assert variable["multi"] is True and variable["includeAll"] is True
    assert variable["datasource"]["uid"] == DATASOURCE_UID


def test_every_panel_has_the_datasource_and_queries_filtered_by_node() -> None:
    board = dashboard()
    for p in panels(board):
        assert p["datasource"] == {"type": "prometheus", "uid": DATASOURCE_UID}, p["title"]
        assert p["targets"], p["title"]
        for target in p["targets"]:
            assert target["datasource"]["uid"] == DATASOURCE_UID
            assert 'node=~"$node"' in target["expr"], f"{p['title']}: {target['expr']}"


def test_throughput_has_two_lines_explained() -> None:
    throughput = panel(dashboard(), "Throughput (tok/s)")
    assert [t["legendFormat"] for t in throughput["targets"]] == [
        "end-to-end",
        "inter-token (1/TPOT)",
    ]
    description = throughput["description"]
    assert "End-to-end" in description and "Inter-token" in description
    assert "prefill" in description


@pytest.mark.parametrize("title", ["TTFT p50 / p95", "TPOT p50 / p95"])
def test_latency_quantiles_show_idle_not_an_outage(title: str) -> None:
    latency = panel(dashboard(), title)
    assert shows_idle(latency)
    assert latency["fieldConfig"]["defaults"]["noValue"] == "idle"
    assert [t["legendFormat"] for t in latency["targets"]] == ["p50", "p95"]
    assert all(t["expr"].startswith("histogram_quantile(") for t in latency["targets"])
    assert latency["options"]["reduceOptions"]["calcs"] == ["last"]


def test_only_latency_panels_are_idle_able() -> None:
    idle = {q.panel for q in queries(dashboard()) if q.idle}
    assert idle == {"TTFT p50 / p95", "TPOT p50 / p95", "Latency p50 / p95 over time"}


def test_kv_cache_panel() -> None:
    assert exprs(dashboard(), "KV cache use") == ['vllm:kv_cache_usage_perc{node=~"$node"}']


def test_rdma_gbits_per_port_from_the_byte_counters() -> None:
    assert exprs(dashboard(), "RDMA Gb/s per port") == [
        'rate(sparkrack_rdma_port_xmit_bytes_total{node=~"$node"}[$__rate_interval]) * 8 / 1e9',
        'rate(sparkrack_rdma_port_rcv_bytes_total{node=~"$node"}[$__rate_interval]) * 8 / 1e9',
    ]


def test_cpu_by_core_class_uses_the_plans_cpu_sets() -> None:
    found = exprs(dashboard(plan("gb10-2")), "CPU busy by core class")
    housekeeping = 'cpu=~"0|1|2|3|4|10|11|12|13|14"'
    compute = 'cpu=~"5|6|7|8|9|15|16|17|18|19"'
    assert len(found) == 2
    assert housekeeping in found[0] and compute in found[1]
    assert all('node=~"spark-1|spark-2"' in expr for expr in found)


def test_cpu_by_core_class_is_one_line_without_pinning() -> None:
    raw = cluster("gb10-2")
    raw["cpu_pinning"] = {**raw.get("cpu_pinning", {}), "enabled": False}
    board = dashboard(plan_of("gb10-2", raw))
    legends = [t["legendFormat"] for t in panel(board, "CPU busy by core class")["targets"]]
    assert legends == ["{{node}} all cores"]


def test_gpu_panels_utilisation_power_and_no_fan() -> None:
    board = dashboard()
    assert exprs(board, "GPU utilisation") == ['nvidia_smi_utilization_gpu_ratio{node=~"$node"}']
    assert exprs(board, "GPU power") == ['nvidia_smi_power_draw_watts{node=~"$node"}']
    every = " ".join(q.expr for q in queries(board)) + " ".join(p["title"] for p in panels(board))
    assert "fan" not in every.lower()


def test_gpu_memory_reads_meminfo_on_unified_memory() -> None:
    assert exprs(dashboard(), "GPU memory")[0] == (
        'node_memory_MemTotal_bytes{node=~"$node"} - node_memory_MemAvailable_bytes{node=~"$node"}'
    )
    dedicated = dashboard(plan(gpu_memory_from="nvidia-smi"))
    assert exprs(dedicated, "GPU memory")[0] == 'nvidia_smi_memory_used_bytes{node=~"$node"}'


def test_energy_without_a_tariff_has_no_cost_panel() -> None:
    board = dashboard()
    assert exprs(board, "Energy per day")[0] == (
        '(count(up{job="node-exporter", node=~"$node", node=~"spark-1|spark-2"}) * 120) * 24 / 1000'
    )
    assert not [p for p in panels(board) if "cost" in p["title"].lower()]


def test_cost_per_day_at_the_stacks_tariff() -> None:
    board = dashboard(plan(tariff={"per_kwh": 1.04, "currency": "zł"}))
    cost = panel(board, "Energy cost per day (zł)")
    assert cost["fieldConfig"]["defaults"]["unit"] == "suffix: zł"
    assert all(t["expr"].endswith(" * 1.04") for t in cost["targets"])


@pytest.mark.parametrize(
    ("breakage", "problem"),
    [
        (lambda b: rows(b)[1].update(collapsed=False), "row 'vLLM' is open"),
        (lambda b: rows(b)[0].update(collapsed=True), "is the overview and must be open"),
        (lambda b: b["templating"].update(list=[]), "no `node` template variable"),
        (lambda b: next(panels(b)).pop("datasource"), "Throughput (tok/s): no datasource"),
        (lambda b: next(panels(b)).update(targets=[]), "Throughput (tok/s): no query"),
        (lambda b: next(panels(b)).update(title="Fan speed"), "Fan speed: GB10 has no fan"),
        (lambda b: next(panels(b)).update(id=1), "panel id 1 used 2 times"),
        (
            lambda b: rows(b)[0]["panels"].append(b["panels"].pop(1)),
            "open row 'Overview' holds panels Grafana will not show",
        ),
        (
            lambda b: b["panels"].append({"type": "timeseries", "title": "X", "targets": []}),
            "X: below collapsed row",
        ),
    ],
)
def test_dashboard_problems_are_found(breakage: Any, problem: str) -> None:
    board = copy.deepcopy(dashboard())
    breakage(board)
    assert any(problem in found for found in dashboard_problems(board)), dashboard_problems(board)

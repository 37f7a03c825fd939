"""`sparkrack monitoring lint`: the verdicts, against a fake Prometheus.

The fake answers the lint's own probes (`count({__name__=...})`, `count(metric{matcher})`,
`count by (label) (metric)`) from a small series store, and each panel query from a canned
answer, so every verdict can be produced on purpose; among them seed 001's `mountpoint="/host"`.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from typing import Any

import pytest

from sparkrack.cli import main
from sparkrack.monitoring.dashboard_check import PanelQuery
from sparkrack.ops import monitoring_lint as lint
from sparkrack.ops.monitoring_lint import (
    IDLE,
    MISSING_METRIC,
    NO_TRAFFIC,
    OK,
    REFUSED,
    WRONG_LABEL,
    LintRow,
    Matcher,
    PrometheusError,
    Selector,
    Series,
)
from sparkrack.transport import ssh
from sparkrack.transport.target import Result, Target

from .support import cluster, plan_of

NAN = math.nan
MATCHER = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)(=~|!~|!=|=)"([^"]*)"')


def matches(labels: dict[str, str], label: str, op: str, value: str) -> bool:
    have = labels.get(label, "")
    if op in ("=~", "!~"):
        return bool(re.fullmatch(value, have)) == (op == "=~")
    return (have == value) == (op == "=")


class FakePrometheus:
    """Series in a store; panel queries answered from `answers` (empty when not listed)."""

    def __init__(self, *series: dict[str, str], answers: dict[str, list[Series]] | None = None):
        self.series = list(series)
        self.answers = answers or {}
        self.asked: list[str] = []

    def query(self, promql: str) -> list[Series]:
        self.asked.append(promql)
        if promql in self.answers:
            return self.answers[promql]
        if found := re.fullmatch(r'count\(\{__name__="(.+)"\}\)', promql):
            return self.counted(s for s in self.series if s["__name__"] == found[1])
        if found := re.fullmatch(r"count\((\S+?)\{(.+)\}\)", promql):
            label, op, value = MATCHER.fullmatch(found[2]).groups()  # type: ignore[union-attr]
            return self.counted(
                s for s in self.series if s["__name__"] == found[1] and matches(s, label, op, value)
            )
        if found := re.fullmatch(r"count by \((\w+)\) \((\S+)\)", promql):
            values = {s.get(found[1]) for s in self.series if s["__name__"] == found[2]}
            return [({found[1]: v} if v else {}, 1.0) for v in values]
        return []

    @staticmethod
    def counted(series: Any) -> list[Series]:
        n = len(list(series))
        return [({}, float(n))] if n else []


class Refusing:
    def query(self, promql: str) -> list[Series]:
        raise PrometheusError(f"`{promql}`: parse error at char 5")


def verdict(api: Any, expr: str, idle: bool = False) -> LintRow:
    return lint.lint_query(api, PanelQuery("panel", "A", expr, idle), expr)


def fs(mountpoint: str, node: str = "spark-1") -> dict[str, str]:
    return {"__name__": "node_filesystem_avail_bytes", "mountpoint": mountpoint, "node": node}


def test_mountpoint_host_is_a_wrong_label_and_shows_the_values_there_are() -> None:
    """Seed 001: with --path.rootfs=/host node-exporter reports `/`, not `/host`."""
    api = FakePrometheus(fs("/"), fs("/boot/efi"), fs("/", node="spark-2"))
    row = verdict(api, 'node_filesystem_avail_bytes{node=~"spark-1|spark-2", mountpoint="/host"}')
    assert row.verdict == WRONG_LABEL and row.failed
    assert row.detail == (
        'node_filesystem_avail_bytes{mountpoint="/host"} matches nothing;'
        ' mountpoint has "/", "/boot/efi"'
    )


def test_the_right_mountpoint_is_ok() -> None:
    expr = 'node_filesystem_avail_bytes{node=~"spark-1|spark-2", mountpoint="/"}'
    api = FakePrometheus(fs("/"), answers={expr: [({"node": "spark-1"}, 1e9)]})
    row = verdict(api, expr)
    assert (row.verdict, row.series, row.failed) == (OK, 1, False)


def test_a_metric_nobody_exports_is_missing() -> None:
    api = FakePrometheus(fs("/"))
    row = verdict(api, 'nvidia_smi_fan_speed_ratio{node=~"spark-1"}')
    assert (row.verdict, row.detail) == (
        MISSING_METRIC,
        "no series named nvidia_smi_fan_speed_ratio",
    )
    assert row.failed


def test_a_metric_without_the_node_label_is_a_wrong_label() -> None:
    api = FakePrometheus({"__name__": "sparkrack_rdma_port_up", "device": "rocep1s0f0"})
    row = verdict(api, 'sparkrack_rdma_port_up{node=~"spark-1|spark-2"}')
    assert row.verdict == WRONG_LABEL
    assert row.detail.endswith("sparkrack_rdma_port_up has no node label")


def test_many_label_values_are_cut_short() -> None:
    api = FakePrometheus(*(fs(f"/m{i}") for i in range(12)))
    row = verdict(api, 'node_filesystem_avail_bytes{mountpoint="/host"}')
    assert row.detail.endswith('"/m4", "/m5" and 4 more')


QUANTILE = (
    "histogram_quantile(0.5, sum by (le) (rate(vllm:time_to_first_token_seconds_bucket"
    '{node=~"spark-1|spark-2"}[1m])))'
)
TTFT = {"__name__": "vllm:time_to_first_token_seconds_bucket", "node": "spark-1", "le": "0.1"}


def test_a_quantile_that_is_nan_while_idle_is_idle() -> None:
    api = FakePrometheus(TTFT, answers={QUANTILE: [({}, NAN)]})
    row = verdict(api, QUANTILE, idle=True)
    assert (row.verdict, row.failed) == (IDLE, False)


def test_a_quantile_with_no_samples_in_the_window_is_idle() -> None:
    row = verdict(FakePrometheus(TTFT), QUANTILE, idle=True)
    assert (row.verdict, row.detail) == (IDLE, "no requests in the window")


def test_nan_on_a_panel_not_marked_idle_is_no_traffic_yet() -> None:
    api = FakePrometheus(TTFT, answers={QUANTILE: [({}, NAN)]})
    assert verdict(api, QUANTILE).verdict == NO_TRAFFIC


def test_a_quantile_on_a_missing_histogram_is_not_idle() -> None:
    """Idle excuses an empty window, not a histogram that is not there."""
    row = verdict(FakePrometheus(), QUANTILE, idle=True)
    assert row.verdict == MISSING_METRIC
    assert row.detail == "no series named vllm:time_to_first_token_seconds_bucket"


RDMA = 'rate(sparkrack_rdma_port_xmit_bytes_total{node=~"spark-1"}[1m]) * 8 / 1e9'
RDMA_SERIES = {"__name__": "sparkrack_rdma_port_xmit_bytes_total", "node": "spark-1"}


def test_a_rate_over_an_existing_counter_that_is_empty_is_no_traffic_yet() -> None:
    row = verdict(FakePrometheus(RDMA_SERIES), RDMA)
    assert (row.verdict, row.failed) == (NO_TRAFFIC, False)


def test_a_rate_that_is_zero_everywhere_is_no_traffic_yet() -> None:
    api = FakePrometheus(RDMA_SERIES, answers={RDMA: [({"device": "a"}, 0.0), ({}, 0.0)]})
    row = verdict(api, RDMA)
    assert (row.verdict, row.series, row.detail) == (NO_TRAFFIC, 2, "2 series, all 0")


def test_a_rate_with_traffic_is_ok() -> None:
    api = FakePrometheus(RDMA_SERIES, answers={RDMA: [({"device": "a"}, 0.8)]})
    assert verdict(api, RDMA).verdict == OK


def test_a_query_prometheus_refuses_fails() -> None:
    row = verdict(Refusing(), "sum(")
    assert row.verdict == REFUSED and row.failed
    assert "parse error" in row.detail


@pytest.mark.parametrize(
    ("promql", "found"),
    [
        (
            QUANTILE,
            [
                Selector(
                    "vllm:time_to_first_token_seconds_bucket",
                    (Matcher("node", "=~", "spark-1|spark-2"),),
                )
            ],
        ),
        (
            'sum by (node) (up{job="vllm"}) / count(node_load1) > bool 0',
            [Selector("up", (Matcher("job", "=", "vllm"),)), Selector("node_load1", ())],
        ),
        (
            'sum(avg_over_time(x_watts{node=~"a"}[1d])) * 24 / 1000',
            [Selector("x_watts", (Matcher("node", "=~", "a"),))],
        ),
    ],
)
def test_selectors(promql: str, found: list[Selector]) -> None:
    assert lint.selectors(promql) == found


def test_every_dashboard_query_has_selectors_with_metric_names() -> None:
    plan = plan_of("sim-2", cluster("sim-2"))
    for item in lint.dashboard_queries(plan):
        found = lint.selectors(lint.concrete(item.expr, plan))
        assert found, item.expr
        for selector in found:
            assert re.fullmatch(
                r"(vllm:|nvidia_smi_|node_|sparkrack_|container_|up$|scrape_).*", selector.metric
            ), f"{item.panel}: {selector.metric}"


def test_concrete_selects_every_node_and_a_rate_window_of_four_scrapes() -> None:
    plan = plan_of("sim-2", cluster("sim-2"))
    expr = 'rate(x{node=~"$node"}[$__rate_interval])'
    assert lint.concrete(expr, plan) == 'rate(x{node=~"spark-1|spark-2"}[60s])'


def test_the_whole_dashboard_on_a_healthy_prometheus() -> None:
    plan = plan_of("sim-2", cluster("sim-2"))
    items = lint.dashboard_queries(plan)
    answers = {lint.concrete(i.expr, plan): [({"node": "spark-1"}, 1.0)] for i in items}
    rows = lint.lint_queries(FakePrometheus(answers=answers), plan, items)
    assert len(rows) == len(items) > 30
    assert {row.verdict for row in rows} == {OK}
    text = lint.render(rows)
    assert text.splitlines()[0].split() == ["PANEL", "VERDICT", "QUERY"]
    assert text.splitlines()[-1] == f"{len(rows)} queries, 0 failed ({len(rows)} ok)"


def test_render_shows_the_reason_under_the_row() -> None:
    rows = [
        LintRow("Root filesystem used", "q1", WRONG_LABEL, 0, 'mountpoint has "/"'),
        LintRow("TTFT", "q2", IDLE, 1),
    ]
    lines = lint.render(rows).splitlines()
    assert lines[1].split() == ["Root", "filesystem", "used", "wrong", "label", "q1"]
    assert lines[2].strip() == '-> mountpoint has "/"'
    assert lines[-1] == "2 queries, 1 failed (1 idle, 1 wrong label)"


# What Prometheus answers for a quantile over an idle window.
GOLDEN_IDLE = (
    '{"status":"success","data":{"resultType":"vector",'
    '"result":[{"metric":{},"value":[1767225600.123,"NaN"]}]}}'
)


def test_parse_answer() -> None:
    (labels, value), *_ = lint.parse_answer(GOLDEN_IDLE, "q")
    assert labels == {} and math.isnan(value)
    scalar = '{"status":"success","data":{"resultType":"scalar","result":[1767225600,"2"]}}'
    assert lint.parse_answer(scalar, "q") == [({}, 2.0)]
    refused = '{"status":"error","errorType":"bad_data","error":"parse error"}'
    with pytest.raises(PrometheusError, match="`q`: parse error"):
        lint.parse_answer(refused, "q")
    with pytest.raises(PrometheusError, match="not a Prometheus answer"):
        lint.parse_answer("<html>", "q")


TARGET = Target("spark-1", "198.18.0.11", 22, "sparkrack", "/k", "/kh")


def test_ssh_prometheus_curls_the_api_on_the_node(monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[str] = []

    def run(target: Target, command: str, **_: Any) -> Result:
        ran.append(command)
        return Result(GOLDEN_IDLE, "", 0)

    monkeypatch.setattr(ssh, "run", run)
    series = lint.SshPrometheus(TARGET, 9090).query('up{job="vllm"}')
    assert math.isnan(series[0][1])
    assert ran == [
        "curl -sS --max-time 10 -G --data-urlencode 'query=up{job=\"vllm\"}'"
        " http://198.18.0.11:9090/api/v1/query"  # its management address, not loopback
    ]


def test_ssh_prometheus_not_answering_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def run(target: Target, command: str, **_: Any) -> Result:
        return Result("", "curl: (7) Failed to connect to 127.0.0.1 port 9090", 7)

    monkeypatch.setattr(ssh, "run", run)
    with pytest.raises(PrometheusError, match=r"node spark-1 \(198.18.0.11\): Prometheus at"):
        lint.SshPrometheus(TARGET, 9090).query("up")


def fake_lint(rows: list[LintRow]) -> Callable[..., list[LintRow]]:
    def lint_stack(stack: str, stacks_dir: Any = None) -> list[LintRow]:
        assert stack == "sim-2"
        return rows

    return lint_stack


def test_cli_exits_1_on_a_broken_query(monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    rows = [LintRow("p", "q", OK, 1), LintRow("fs", "q2", MISSING_METRIC, 0, "no series")]
    monkeypatch.setattr(lint, "lint_stack", fake_lint(rows))
    assert main(["monitoring", "lint", "--stack", "sim-2"]) == 1
    out, err = capsys.readouterr()
    assert "missing metric" in out
    assert "stack sim-2: 1 of 2 panel queries are broken" in err


def test_cli_exits_0_when_only_idle_or_quiet(monkeypatch: pytest.MonkeyPatch) -> None:
    rows = [LintRow("p", "q", IDLE, 0), LintRow("r", "q2", NO_TRAFFIC, 0)]
    monkeypatch.setattr(lint, "lint_stack", fake_lint(rows))
    assert main(["monitoring", "lint", "--stack", "sim-2"]) == 0


def test_lint_stack_asks_the_prometheus_node_over_ssh(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[tuple[str, str]] = []

    def run(target: Target, command: str, **_: Any) -> Result:
        asked.append((target.node, command))
        answer = {"resultType": "vector", "result": [{"metric": {}, "value": [0, "1"]}]}
        return Result(json.dumps({"status": "success", "data": answer}), "", 0)

    monkeypatch.setattr(ssh, "run", run)
    rows = lint.lint_stack("sim-2")
    assert rows and all(row.verdict == OK for row in rows)
    assert {node for node, _ in asked} == {"spark-1"}
    assert all("http://198.18.0.11:9090/api/v1/query" in command for _, command in asked)

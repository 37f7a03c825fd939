"""`sparkrack monitoring lint`: every dashboard query, run against the live Prometheus.

Seed 001 wished for this after a panel filtered on `mountpoint="/host"` while node-exporter, run
with `--path.rootfs=/host`, reports `/`: the panel was empty and nothing said why. A query that
returns nothing is taken apart into its selectors to say which is the case:

- ok: series came back;
- idle: a panel that maps NaN to "idle" (latency quantiles) has no requests in the window;
- no traffic yet: the metrics are there, but rates over them are empty or zero;
- wrong label: the metric exists but a label matcher matches none of it (the values the label
  does have are listed);
- missing metric: no series of that name at all (an exporter down, or a misspelt name).

The last two, and a query Prometheus refuses, are failures.
"""

from __future__ import annotations

import json
import math
import re
import shlex
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from sparkrack.config.load import load_stack_file
from sparkrack.monitoring.dashboard_check import PanelQuery, queries
from sparkrack.monitoring.grafana import grafana_files
from sparkrack.monitoring.prometheus import duration
from sparkrack.plan import Plan, make_plan
from sparkrack.text.addresses import http_url
from sparkrack.transport import ssh
from sparkrack.transport.target import SshError, Target

OK = "ok"
IDLE = "idle"
NO_TRAFFIC = "no traffic yet"
WRONG_LABEL = "wrong label"
MISSING_METRIC = "missing metric"
REFUSED = "query refused"
FAILURES = (WRONG_LABEL, MISSING_METRIC, REFUSED)
# Grafana's $__rate_interval is at least four scrape intervals.
RATE_WINDOW_SCRAPES = 4
QUERY_TIMEOUT_S = 10
LABEL_VALUES_SHOWN = 8

Series = tuple[dict[str, str], float]


class PrometheusError(Exception):
    """Prometheus refused the query or could not be reached; the message says which."""


class PrometheusApi(Protocol):
    def query(self, promql: str) -> list[Series]:
        """An instant query: each series' labels and value. Raises PrometheusError."""


@dataclass(frozen=True)
class LintRow:
    panel: str
    query: str  # as run: $node and $__rate_interval substituted
    verdict: str
    series: int
    detail: str = ""

    @property
    def failed(self) -> bool:
        return self.verdict in FAILURES


# --- reading PromQL -----------------------------------------------------------------------------

NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
SELECTOR = re.compile(rf"({NAME})\s*\{{([^}}]*)\}}")
MATCHER = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"')
GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or"}
KEYWORDS |= {"unless", "offset", "inf", "nan"}


@dataclass(frozen=True)
class Matcher:
    label: str
    op: str
    value: str

    def __str__(self) -> str:
        return f'{self.label}{self.op}"{self.value}"'


@dataclass(frozen=True)
class Selector:
    metric: str
    matchers: tuple[Matcher, ...]


def selectors(promql: str) -> list[Selector]:
    """The metric selectors of a query, in order, each once."""
    found = [
        Selector(name, tuple(Matcher(*m) for m in MATCHER.findall(body)))
        for name, body in SELECTOR.findall(promql)
    ]
    bare = re.sub(r'"(?:[^"\\]|\\.)*"|\[[^\]]*\]|\{[^}]*\}', " ", promql)
    bare = GROUPING.sub(" ", bare)
    for match in re.finditer(rf"(?<![\w:.]){NAME}(?![\w:])(?!\s*\()", bare):
        name = match.group(0)
        if name.lower() not in KEYWORDS and not any(s.metric == name for s in found):
            found.append(Selector(name, ()))
    return list(dict.fromkeys(found))


def concrete(expr: str, plan: Plan) -> str:
    """The query as Grafana would send it with every node selected."""
    window = duration(RATE_WINDOW_SCRAPES * plan.monitoring.scrape_interval_s)
    nodes = "|".join(node.name for node in plan.nodes)
    return (
        expr.replace("$__rate_interval", window)
        .replace("$__interval", duration(plan.monitoring.scrape_interval_s))
        .replace("$node", nodes)
    )


# --- verdicts -----------------------------------------------------------------------------------


Verdict = tuple[str, int, str]  # verdict, series returned, detail


def lint_query(api: PrometheusApi, item: PanelQuery, promql: str) -> LintRow:
    try:
        verdict, series, detail = classify(api, item, promql)
    except PrometheusError as error:
        verdict, series, detail = REFUSED, 0, str(error)
    return LintRow(item.panel, promql, verdict, series, detail)


def classify(api: PrometheusApi, item: PanelQuery, promql: str) -> Verdict:
    values = [value for _, value in api.query(promql)]
    numbers = [value for value in values if not math.isnan(value)]
    if numbers:
        if is_rate(promql) and not any(numbers):
            return NO_TRAFFIC, len(values), f"{len(values)} series, all 0"
        return OK, len(values), ""
    if values:
        detail = f"{len(values)} series, all NaN: nothing in the window"
        return (IDLE if item.idle else NO_TRAFFIC), len(values), detail
    return diagnose_empty(api, item, promql)


def is_rate(promql: str) -> bool:
    return bool(re.search(r"\b(rate|irate|increase)\s*\(", promql))


def diagnose_empty(api: PrometheusApi, item: PanelQuery, promql: str) -> Verdict:
    """An empty answer: which selector is to blame, if any."""
    for selector in selectors(promql):
        if not api.query(f'count({{__name__="{selector.metric}"}})'):
            return MISSING_METRIC, 0, f"no series named {selector.metric}"
    for selector in selectors(promql):
        for matcher in selector.matchers:
            if not api.query(f"count({selector.metric}{{{matcher}}})"):
                values = label_values(api, selector.metric, matcher.label)
                return WRONG_LABEL, 0, f"{selector.metric}{{{matcher}}} matches nothing; {values}"
    if item.idle:
        return IDLE, 0, "no requests in the window"
    return NO_TRAFFIC, 0, "the metrics exist; nothing in the window yet"


def label_values(api: PrometheusApi, metric: str, label: str) -> str:
    found = sorted(
        {
            labels[label]
            for labels, _ in api.query(f"count by ({label}) ({metric})")
            if label in labels
        }
    )
    if not found:
        return f"{metric} has no {label} label"
    shown = ", ".join(f'"{value}"' for value in found[:LABEL_VALUES_SHOWN])
    more = f" and {len(found) - LABEL_VALUES_SHOWN} more" if len(found) > LABEL_VALUES_SHOWN else ""
    return f"{label} has {shown}{more}"


def lint_queries(api: PrometheusApi, plan: Plan, items: Iterable[PanelQuery]) -> list[LintRow]:
    return [lint_query(api, item, concrete(item.expr, plan)) for item in items]


def dashboard_queries(plan: Plan) -> list[PanelQuery]:
    """Every panel query of every generated dashboard, read back from its JSON."""
    return [
        item
        for path, content in sorted(grafana_files(plan).items())
        if path.startswith("dashboards/") and path.endswith(".json")
        for item in queries(json.loads(content))
    ]


# --- the live Prometheus, over SSH --------------------------------------------------------------


class SshPrometheus:
    """Prometheus' HTTP API on its node, asked with curl over the stack's pinned SSH: it listens
    on the management address, which the operator's machine may not reach directly."""

    def __init__(self, target: Target, port: int) -> None:
        self.target = target
        self.url = http_url(target.host, port, "/api/v1/query")

    def query(self, promql: str) -> list[Series]:
        command = shlex.join(
            [
                *("curl", "-sS", "--max-time", str(QUERY_TIMEOUT_S), "-G"),
                *("--data-urlencode", f"query={promql}", self.url),
            ]
        )
        try:
            result = ssh.run(self.target, command, check=False, timeout=QUERY_TIMEOUT_S + 20)
        except SshError as error:
            raise PrometheusError(str(error)) from error
        if not result.ok:
            raise PrometheusError(
                f"{self.target.where()}: Prometheus at {self.url} did not answer:"
                f" {result.stderr.strip() or f'curl exit {result.exit_status}'}"
            )
        return parse_answer(result.stdout, promql)


def parse_answer(body: str, promql: str) -> list[Series]:
    try:
        answer = json.loads(body)
    except json.JSONDecodeError as error:
        raise PrometheusError(f"`{promql}`: not a Prometheus answer: {body[:200]!r}") from error
    if answer.get("status") != "success":
        raise PrometheusError(f"`{promql}`: {answer.get('error', answer)}")
    data = answer["data"]
    if data.get("resultType") == "scalar":
        return [({}, float(data["result"][1]))]
    return [(dict(s.get("metric", {})), float(s["value"][1])) for s in data["result"]]


def lint_stack(stack: str, stacks_dir: Path | None = None) -> list[LintRow]:
    """Lint the stack's dashboards against its live Prometheus (on the Plan's prometheus node)."""
    plan = load_plan(stack, stacks_dir)
    node = plan.node(plan.monitoring.prometheus_node)
    api = SshPrometheus(Target.for_node(node), plan.monitoring.prometheus_port)
    try:
        return lint_queries(api, plan, dashboard_queries(plan))
    finally:
        ssh.close_all()


def load_plan(stack: str, stacks_dir: Path | None) -> Plan:
    return make_plan(load_stack_file(stack, stacks_dir))


def render(rows: list[LintRow]) -> str:
    """PANEL, VERDICT, QUERY; a failure's or a quiet panel's reason on the line below."""
    panel_width = max(len("PANEL"), *(len(r.panel) for r in rows))
    verdict_width = max(len("VERDICT"), *(len(r.verdict) for r in rows))
    lines = [f"{'PANEL':{panel_width}}  {'VERDICT':{verdict_width}}  QUERY"]
    for r in rows:
        lines.append(f"{r.panel:{panel_width}}  {r.verdict:{verdict_width}}  {r.query}")
        if r.detail:
            lines.append(f"{'':{panel_width}}  {'':{verdict_width}}  -> {r.detail}")
    failed = sum(r.failed for r in rows)
    lines.append(f"{len(rows)} queries, {failed} failed" + summary(rows))
    return "\n".join(lines)


def summary(rows: list[LintRow]) -> str:
    counts = {verdict: sum(r.verdict == verdict for r in rows) for verdict in verdicts(rows)}
    return " (" + ", ".join(f"{n} {verdict}" for verdict, n in counts.items()) + ")"


def verdicts(rows: list[LintRow]) -> list[str]:
    order = (OK, IDLE, NO_TRAFFIC, WRONG_LABEL, MISSING_METRIC, REFUSED)
    return [verdict for verdict in order if any(r.verdict == verdict for r in rows)]

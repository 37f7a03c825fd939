"""The monitoring role on the package's deployed sim-2 (issue 8), in order: `pulumi up` ended with
`sparkrack verify` on the deployed plan (a pulumi_command local Command); it runs the exporters on
both nodes and Prometheus on the head, which soon reports all 7 targets up; the head's collector
reads NCCL on RoCE from the engine log (the fallback series 0, its alert quiet); `sparkrack verify`
passes with every monitoring check run; `sparkrack monitoring lint` finds only the latency
quantiles idle before any request, and nothing empty once requests reach the engine stand-in;
rounds of 50 concurrent scrapes are all answered while Prometheus's own scrapes of that
node-exporter keep succeeding under a second; the RDMA panel's query shows a transfer over the
simulated fabric (the simulator maps the veths' bytes to the RDMA counters); a prometheus.yml
emptied by hand and loaded is put back and loaded by one `up`. (node-exporter re-run by hand with
`--collector.infiniband` is among the faults test_1_repairs injects at once.)

The images are built on this machine (sim-2 declares `image_source: control`), loaded on the head
over SSH; the other node gets the exporters from the head over the fabric.
"""

from __future__ import annotations

import json
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from sparkrack.monitoring.panels import dashboard_rows, fabric_panels
from sparkrack.ops.monitoring_lint import IDLE, OK, LintRow, lint_stack, render
from sparkrack.plan import Plan
from sparkrack.sim.keys import ssh_command
from sparkrack.text.addresses import http_url
from tests.e2e.conftest import SIM_API_KEY, PulumiProject
from tests.e2e.sim_fixtures import as_service, poll, ssh

from .rack import STACK, TIMES, changes, prometheus, verify_report

pytestmark = pytest.mark.e2e

EXPORTER_UNIT = "~/.config/systemd/user/node-exporter.service"
EXPORTER_QUADLET = "~/.config/containers/systemd/node-exporter.container"
TRUST_KEY = "~/.ssh/sparkrack_cluster_ed25519"
SCRAPES = 50
MAX_REQUESTS = 40  # node-exporter's --web.max-requests default
# A scrape with no answer in this long is hung: seed 001's exporter never answered. Not a speed
# bar: with both racks deployed on two cores, 50 in flight have taken up to 10 s to answer (CI).
HUNG_S = 30
JOB = "node-exporter"
JSON = "Content-Type: application/json"
AUTH = f"Authorization: Bearer {SIM_API_KEY}"
# 75 MB in the 30 s window: a fraction of the 400 MB sent, far above the idle fabric.
RDMA_SEEN_GBPS = 0.02


def test_up_ended_with_the_verification_of_the_deployed_plan(
    deploy: PulumiProject, plan: Plan
) -> None:
    state = json.loads(deploy.run("stack", "export", "--stack", STACK).stdout)
    resources = state["deployment"]["resources"]
    [verify] = [r for r in resources if r["type"] == "command:local:Command"]
    [image] = [r for r in resources if r["urn"].endswith(f"::{plan.head_node}-engine-image")]
    made = image["outputs"]["image_id"]  # what verification holds every node's image to
    assert verify["inputs"]["triggers"] == [STACK, plan.digest(), made]
    assert f"--image-id {made}" in verify["inputs"]["create"]
    assert Plan.model_validate_json(verify["inputs"]["stdin"]) == plan  # the program's own
    assert verify["outputs"]["stdout"].startswith(f"stack {STACK}: ")
    assert " 0 failed, " in verify["outputs"]["stdout"]


def targets_up(plan: Plan) -> set[tuple[str, str]]:
    data = prometheus(plan, "targets", state="active") or {"activeTargets": []}
    return {
        (t["labels"]["job"], t["labels"]["instance"])
        for t in data["activeTargets"]
        if t["health"] == "up"
    }


def outcomes(report: dict[str, Any], category: str) -> dict[tuple[str, str], str]:
    return {
        (r["node"], r["id"]): r["outcome"] for r in report["results"] if r["category"] == category
    }


def test_prometheus_reports_every_target_up(deploy: PulumiProject, plan: Plan) -> None:
    want = {(t.job, t.target) for t in plan.monitoring.targets}
    assert len(want) == 7
    started = time.monotonic()
    up = poll(lambda: json.dumps(sorted(targets_up(plan))), lambda _: want <= targets_up(plan), 180)
    TIMES["targets up after up"] = round(time.monotonic() - started, 1)
    assert want <= targets_up(plan), f"up: {up}; want {sorted(want)}"


def test_the_engine_log_reads_as_nccl_on_roce_not_sockets(plan: Plan) -> None:
    """The head's collector follows the engine log (every rank's NCCL lines, through Ray): the
    NcclSocketFallback alert's series is there, 0, and the alert quiet."""

    def fallback() -> str:
        found = prometheus(plan, "query", query="sparkrack_nccl_socket_fallback") or {}
        return json.dumps([r["value"][1] for r in found.get("result", [])])

    assert poll(fallback, lambda seen: seen != "[]", 90) == '["0"]'
    alerts = prometheus(plan, "alerts") or {"alerts": []}
    assert "NcclSocketFallback" not in {a["labels"]["alertname"] for a in alerts["alerts"]}


def test_verify_passes_with_every_monitoring_check(deploy: PulumiProject) -> None:
    started = time.monotonic()
    report = verify_report(deploy)
    TIMES["verify"] = round(time.monotonic() - started, 1)
    failed = [r for r in report["results"] if r["outcome"] == "failed"]
    assert report["exit_status"] == 0, failed
    # Skipped only by a declared fact: gb10-sim declares that no NIC driver raises IRQs.
    skipped = {
        (r["node"], r["id"], r["detail"]) for r in report["results"] if r["outcome"] == "skipped"
    }
    assert skipped == {
        (node, f"{check}[{node}]", "hardware gb10-sim declares nic_irqs: none (no NIC IRQs)")
        for node in ("spark-1", "spark-2")
        for check in ("test_nic_irq_affinity", "test_irq_pin_applied")
    }
    monitoring = outcomes(report, "monitoring")
    checks = {check.split("[")[0] for _, check in monitoring}
    assert checks == {
        "test_node_exporter_scrape_time",
        "test_node_exporter_collectors",
        "test_prometheus_targets",
        "test_rdma_counter_series",
    }
    assert set(monitoring.values()) == {"passed"}, monitoring


def lint(project: PulumiProject) -> list[LintRow]:
    return lint_stack(STACK, project.root / "stacks")


def idle_panels(plan: Plan) -> set[str]:
    return {panel.title for _, panels in dashboard_rows(plan) for panel in panels if panel.idle}


def test_lint_without_traffic_finds_only_the_quantiles_idle(
    deploy: PulumiProject, plan: Plan
) -> None:
    """No request has reached the engine yet: the latency quantiles, and only they, read idle;
    nothing fails (rates over idle counters may read "no traffic yet", which is no failure)."""
    started = time.monotonic()
    rows = lint(deploy)
    TIMES["lint"] = round(time.monotonic() - started, 1)
    print(render(rows))
    assert not [row for row in rows if row.failed], render(rows)
    idle = {row.panel for row in rows if row.verdict == IDLE}
    assert idle == idle_panels(plan), render(rows)
    assert len(idle) == 3


def send_requests(plan: Plan, count: int = 6) -> None:
    """Chat completions to the engine stand-in's OpenAI API on the head's management address."""
    url = f"http://{plan.node(plan.head_node).address}:{plan.serving.port}/v1/chat/completions"
    message = {"role": "user", "content": "Say hi."}
    body = json.dumps(
        {"model": plan.serving.served_model_name, "messages": [message], "max_tokens": 16}
    )
    for _ in range(count):
        subprocess.run(
            ["curl", "-sf", "--max-time", "60", "-H", JSON, "-H", AUTH, "-d", body, url],
            capture_output=True,
            check=True,
            timeout=90,
        )


def traffic_panels(plan: Plan) -> set[str]:
    """The throughput and latency panels: the quantiles and every panel over generated tokens."""
    return idle_panels(plan) | {
        panel.title
        for _, panels in dashboard_rows(plan)
        for panel in panels
        if any("vllm:generation_tokens_total" in query.expr for query in panel.queries)
    }


def test_lint_with_traffic_finds_no_empty_panel_query(deploy: PulumiProject, plan: Plan) -> None:
    """A few requests, then lint within about a minute (Prometheus needs two scrapes of the
    engine for a rate): nothing fails, and the throughput and latency panels return series."""
    started = time.monotonic()
    rows: list[LintRow] = []
    while time.monotonic() - started < 90:
        send_requests(plan)
        rows = lint(deploy)
        if all(row.verdict == OK for row in rows if row.panel in traffic_panels(plan)):
            break
    TIMES["lint with traffic ok after"] = round(time.monotonic() - started, 1)
    print(render(rows))
    assert not [row for row in rows if row.failed], render(rows)
    quiet = {row.panel for row in rows if row.verdict != OK}
    assert not quiet & traffic_panels(plan), render(rows)
    assert len(traffic_panels(plan)) >= 5


def prometheus_value(plan: Plan, query: str) -> float:
    data = prometheus(plan, "query", query=query)
    result = (data or {}).get("result", [])
    assert len(result) == 1, f"`{query}`: {result}"
    return float(result[0]["value"][1])


def exporter_metrics(plan: Plan, node: str = "spark-2") -> str:
    listener = plan.node(node).listener("node-exporter")
    return http_url(listener.address, listener.port, "/metrics")


def hammer_script(plan: Plan, node: str, hammer_s: int) -> str:
    """Rounds of SCRAPES concurrent scrapes for `hammer_s`, then one more: each answer's HTTP
    code and time, a `round` line after each round."""
    scrape = (
        "curl -s -o /dev/null -w '%{http_code} %{time_total}\\n' "
        + f"--max-time {HUNG_S} "
        + exporter_metrics(plan, node)
    )
    burst = f"for i in $(seq {SCRAPES}); do {scrape} & done; wait; echo round"
    return f"end=$((SECONDS+{hammer_s})); while [ $SECONDS -lt $end ]; do {burst}; done; {scrape}"


def test_node_exporter_answers_every_one_of_50_concurrent_scrapes(plan: Plan) -> None:
    """Seed 001's exporter hung under load. Rounds of 50 concurrent scrapes hammer every node's
    node-exporter at once for over two scrape intervals. At its default --web.max-requests (40)
    it turns what is beyond 40 in flight away at once (503: its designed back-pressure); what must
    never happen is a scrape left without an answer. So every scrape answers within HUNG_S, at
    least 39 of each round with metrics (Prometheus may hold a slot), one right after is served,
    and Prometheus's own scrapes of that target meanwhile each end before the scrape timeout (a
    hung exporter would hold them to it; how fast they are is recorded, not asserted) and bring
    metrics at least once: one that lands among forty in flight is turned away like the rest
    (seen here: up 0 for that one)."""
    hammer_s = 2 * plan.monitoring.scrape_interval_s + 5
    started = time.monotonic()
    with ThreadPoolExecutor(len(plan.nodes)) as pool:
        scripts = {node.name: hammer_script(plan, node.name, hammer_s) for node in plan.nodes}
        running = {name: pool.submit(ssh, STACK, name, script) for name, script in scripts.items()}
        heard = {name: answer.result().splitlines() for name, answer in running.items()}
    window = round(time.monotonic() - started) + 1
    for node in plan.nodes:
        scrapes_answered(plan, node.name, heard[node.name], window)


def scrapes_answered(plan: Plan, node: str, answers: list[str], window: int) -> None:
    """Every scrape answered, at least MAX_REQUESTS - 1 of each round with metrics, the last one
    too; and Prometheus's own scrapes of the node meanwhile ended before their timeout."""
    rounds = "\n".join(answers[:-1]).split("round")[:-1]
    codes = [line.split()[0] for line in answers if line != "round"]
    assert rounds and all(len(r.split()) == 2 * SCRAPES for r in rounds), node
    assert set(codes) <= {"200", "503"}, f"{node}: a scrape went unanswered: {answers}"
    # Prometheus's own scrape may hold one of the 40 slots during a round (seen in CI: 39).
    for burst_answers in rounds:
        assert burst_answers.split()[::2].count("200") >= MAX_REQUESTS - 1, node
    assert codes[-1] == "200", f"{node}: {answers[-1]}"
    slowest = max(float(line.split()[1]) for line in answers if line != "round")
    TIMES[f"slowest of {len(codes)} scrapes in {len(rounds)} rounds on {node}"] = round(slowest, 2)
    TIMES[f"turned away on {node}"] = codes.count("503")
    target = next(t.target for t in plan.monitoring.targets if t.node == node and t.job == JOB)
    series = f'{{job="{JOB}", instance="{target}"}}'
    scrapes = prometheus_value(plan, f"count_over_time(up{series}[{window}s])")
    assert scrapes >= 2, f"{node}: Prometheus scraped it {scrapes} times meanwhile"
    assert prometheus_value(plan, f"max_over_time(up{series}[{window}s])") == 1, node
    duration = prometheus_value(plan, f"max_over_time(scrape_duration_seconds{series}[{window}s])")
    TIMES[f"Prometheus's slowest scrape of {node} meanwhile"] = round(duration, 3)
    # Not a speed bar (that is the TIMES above): a hung exporter holds a scrape to the timeout.
    hung = plan.monitoring.scrape_timeout_s
    assert duration < hung, f"{node}: Prometheus's scrape took {duration:.2f} s"


def rdma_panel_queries() -> list[str]:
    """The dashboard's RDMA throughput queries, as Grafana would send them for every node."""
    panel = next(p for p in fabric_panels() if p.title.startswith("RDMA Gb/s"))
    return [q.expr.replace("$node", ".*").replace("$__rate_interval", "30s") for q in panel.queries]


def panel_rates(plan: Plan) -> list[float]:
    rates = []
    for query in rdma_panel_queries():
        data = prometheus(plan, "query", query=query)
        rates += [float(series["value"][1]) for series in (data or {}).get("result", [])]
    return rates


def test_rdma_panel_shows_a_transfer_over_the_fabric(plan: Plan) -> None:
    """400 MB over SSH from spark-1 to spark-2's fabric address: the simulator maps the veths'
    bytes to the RDMA counters every second, so the panel's rate (over 30 s, as Grafana asks)
    must climb well above what the idle fabric shows (Ray's and SSH's chatter: not zero)."""
    peer = next(link.address for link in plan.node("spark-2").links if link.address)
    address = peer.split("/")[0]
    send = (
        f"head -c 400M /dev/zero | ssh -i {TRUST_KEY} -o BatchMode=yes {address} 'cat >/dev/null'"
    )
    idle = max(panel_rates(plan), default=0.0)
    transfer = subprocess.Popen(
        ssh_command(STACK, "spark-1", as_service(send)),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        started = time.monotonic()
        peak = 0.0
        while time.monotonic() - started < 120 and peak < max(RDMA_SEEN_GBPS, 10 * idle):
            time.sleep(3)
            peak = max([peak, *panel_rates(plan)])
        TIMES["RDMA rate seen after"] = round(time.monotonic() - started, 1)
        TIMES["RDMA Gb/s idle, in transfer"] = (round(idle, 5), round(peak, 3))
    finally:
        assert transfer.wait(timeout=300) == 0, "the transfer over the fabric failed"
    assert peak >= max(RDMA_SEEN_GBPS, 10 * idle), f"idle {idle} Gb/s, peak {peak} Gb/s"


def test_a_hand_edited_config_prometheus_reloaded_is_put_back_and_loaded_by_one_up(
    deploy: PulumiProject, plan: Plan
) -> None:
    """prometheus.yml emptied by hand and Prometheus reloaded (SIGHUP): it scrapes nothing.
    Preview names the file; one `up` writes it back and restarts Prometheus, which loads it:
    every target is scraped again and nothing is left to change."""
    head = plan.monitoring.prometheus_node
    config = f"{plan.node(head).paths.monitoring.prometheus_config}/prometheus.yml"
    emptied = "printf 'global: {}\\nscrape_configs: []\\n' > " + config
    ssh(STACK, head, as_service(f"{emptied} && podman kill --signal HUP prometheus"))
    loaded = poll(lambda: json.dumps(sorted(targets_up(plan))), lambda out: out == "[]", 60)
    assert loaded == "[]"
    assert changes(deploy) == {f"{head}-prometheus-prometheus-yml": ("update", ["sha256"])}
    deploy.run("up", "--stack", STACK, "--yes", "--skip-preview")
    want = {(t.job, t.target) for t in plan.monitoring.targets}
    poll(lambda: json.dumps(sorted(targets_up(plan))), lambda _: want <= targets_up(plan), 180)
    assert want <= targets_up(plan)
    assert changes(deploy) == {}

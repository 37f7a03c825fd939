"""The generated Prometheus config and alert rules: promtool accepts them, every planned target is
scraped with the labels verification and dashboards rely on, and every alert fires when it should
and stays quiet when it should not (`promtool test rules`).

promtool comes from Debian's `prometheus` package, which .ci/run installs: without it these tests
fail rather than skip, so a CI run cannot pass without having checked the rules.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkrack.monitoring.prometheus import CONFIG_FILE, RULES_FILE, duration, prometheus_files
from sparkrack.plan import Plan
from sparkrack.stackspec import AlertThresholds

from .support import Cluster, cluster, plan_of, refusal

ALERT_TESTS = Path(__file__).parent / "data" / "monitoring" / "alerts_test.yml"
ALERTS = (
    "VLLMDown",
    "TargetDown",
    "RdmaPortDown",
    "NcclSocketFallback",
    "NodeExporterSlow",
    "KVCacheNearFull",
)


def promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    path = shutil.which("promtool")
    assert path, "promtool not found: install Debian's prometheus package (.ci/run does)"
    return subprocess.run(
        [path, *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )


def write_files(plan: Plan, where: Path) -> Path:
    for relative, content in prometheus_files(plan).items():
        (where / relative).parent.mkdir(parents=True, exist_ok=True)
        (where / relative).write_text(content)
    return where


def with_monitoring(stack: str, **options: Any) -> Plan:
    raw: Cluster = cluster(stack)
    raw.setdefault("monitoring", {}).update(options)
    return plan_of(stack, raw)


def config(plan: Plan) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(prometheus_files(plan)[CONFIG_FILE])
    return loaded


@pytest.mark.parametrize(("stack", "targets"), [("sim-2", 7), ("sim-16", 49), ("gb10-2", 7)])
def test_promtool_accepts_config_and_rules(stack: str, targets: int, tmp_path: Path) -> None:
    where = write_files(plan_of(stack, cluster(stack)), tmp_path)

    checked = promtool("check", "config", CONFIG_FILE, cwd=where)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "1 rule files found" in checked.stdout
    rules = promtool("check", "rules", RULES_FILE, cwd=where)
    assert rules.returncode == 0, rules.stdout + rules.stderr
    assert f"{len(ALERTS)} rules found" in rules.stdout
    static = [
        s
        for job in config(plan_of(stack, cluster(stack)))["scrape_configs"]
        for s in job["static_configs"]
    ]
    assert len(static) == targets


def test_promtool_check_config_fails_on_a_bad_config(tmp_path: Path) -> None:
    """The check is real: a timeout above the interval is what Prometheus itself refuses."""
    where = write_files(plan_of("sim-2", cluster("sim-2")), tmp_path)
    bad = config(plan_of("sim-2", cluster("sim-2")))
    bad["global"]["scrape_timeout"] = "20s"
    (where / CONFIG_FILE).write_text(yaml.safe_dump(bad))

    checked = promtool("check", "config", CONFIG_FILE, cwd=where)

    assert checked.returncode != 0
    assert "scrape timeout greater than scrape interval" in checked.stdout + checked.stderr


def test_every_alert_fires_and_stays_quiet_under_promtool(tmp_path: Path) -> None:
    plan = plan_of("sim-2", cluster("sim-2"))
    assert plan.monitoring.alerts == AlertThresholds(), "alerts_test.yml assumes the defaults"
    where = write_files(plan, tmp_path)
    shutil.copy(ALERT_TESTS, where)

    tested = promtool("test", "rules", ALERT_TESTS.name, cwd=where)

    assert tested.returncode == 0, tested.stdout + tested.stderr
    cases = yaml.safe_load(ALERT_TESTS.read_text())["tests"]
    for name in ALERTS:
        expectations = [
            check
            for case in cases
            for check in case["alert_rule_test"]
            if check["alertname"] == name
        ]
        assert any(check["exp_alerts"] for check in expectations), f"{name}: no firing case"
        assert any(not check["exp_alerts"] for check in expectations), f"{name}: no quiet case"


def test_alert_tests_fail_when_a_threshold_moves(tmp_path: Path) -> None:
    """A KV cache threshold of 0.99 no longer fires at 95 %: promtool says so."""
    plan = with_monitoring("sim-2", alerts={"kv_cache_near_full": 0.99})
    where = write_files(plan, tmp_path)
    shutil.copy(ALERT_TESTS, where)

    tested = promtool("test", "rules", ALERT_TESTS.name, cwd=where)

    assert tested.returncode != 0
    assert "KVCacheNearFull" in tested.stdout + tested.stderr


def test_every_target_is_labelled_with_job_instance_and_node() -> None:
    plan = plan_of("sim-2", cluster("sim-2"))
    scraped = {
        (s["labels"]["job"], s["labels"]["instance"], s["labels"]["node"], tuple(s["targets"]))
        for job in config(plan)["scrape_configs"]
        for s in job["static_configs"]
    }
    want = {(t.job, t.target, t.node, (t.target,)) for t in plan.monitoring.targets}
    assert scraped == want
    assert [job["job_name"] for job in config(plan)["scrape_configs"]] == [
        "vllm",
        "node-exporter",
        "nvidia-gpu",
        "cadvisor",
    ]


def test_rule_files_resolve_under_the_config_dir() -> None:
    plan = plan_of("sim-2", cluster("sim-2"))
    assert config(plan)["rule_files"] == ["rules/*.yml"]
    assert RULES_FILE.startswith("rules/") and RULES_FILE.endswith(".yml")


def test_scrape_interval_and_timeout_come_from_the_spec() -> None:
    plan = with_monitoring("sim-2", scrape_interval_s=5)
    assert config(plan)["global"]["scrape_interval"] == "5s"
    assert config(plan)["global"]["scrape_timeout"] == "3333ms"
    plan = with_monitoring("sim-2", scrape_interval_s=30, scrape_timeout_s=20)
    assert config(plan)["global"]["scrape_timeout"] == "20s"


def test_a_timeout_at_or_above_the_interval_is_refused() -> None:
    raw = cluster("sim-2")
    raw.setdefault("monitoring", {}).update(scrape_interval_s=10, scrape_timeout_s=10)

    message = refusal("sim-2", raw)

    assert "monitoring" in message
    assert "scrape_timeout_s 10 must be below scrape_interval_s 10" in message


def test_thresholds_reach_the_rules() -> None:
    plan = with_monitoring("sim-2", alerts={"kv_cache_near_full": 0.8, "node_exporter_slow_s": 0.5})
    rules = yaml.safe_load(prometheus_files(plan)[RULES_FILE])["groups"][0]["rules"]
    exprs = {rule["alert"]: rule["expr"] for rule in rules}
    assert exprs["KVCacheNearFull"] == "vllm:kv_cache_usage_perc > 0.8"
    assert exprs["NodeExporterSlow"] == 'scrape_duration_seconds{job="node-exporter"} > 0.5'
    assert tuple(exprs) == ALERTS


@pytest.mark.parametrize(
    ("seconds", "text"), [(15, "15s"), (10.0, "10s"), (3.333, "3333ms"), (0.5, "500ms")]
)
def test_duration(seconds: float, text: str) -> None:
    assert duration(seconds) == text

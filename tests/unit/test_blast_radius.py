"""`sparkrack plan --against`: what a changed stack does to the deployed one, before `up`."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from sparkrack.cli import main
from sparkrack.plan.rollout import blast_radius, engine_digest, footprint
from tests.unit.support import cluster, plan_of, stacks_dir_with

pytestmark = pytest.mark.unit

DEPLOYED = plan_of("sim-2", cluster("sim-2"))


def radius_of(edit: dict[str, object], downtime: float | None = None) -> dict[str, object]:
    raw = cluster("sim-2")
    raw["serving"].update(edit)
    found = blast_radius(plan_of("sim-2", raw), footprint(DEPLOYED), downtime)
    return found.model_dump(mode="json")


def restarts(radius: dict[str, object]) -> dict[str, list[str]]:
    return {n["node"]: n["restarts"] for n in radius["nodes"]}  # type: ignore[attr-defined]


def test_the_same_stack_changes_nothing_and_serving_continues() -> None:
    radius = radius_of({})
    assert restarts(radius) == {"spark-1": [], "spark-2": []}
    assert radius["serving_stops"] is False


def test_a_served_flag_restarts_only_the_api_and_moves_no_weights() -> None:
    radius = radius_of({"max_model_len": 65536}, downtime=23.4)
    assert restarts(radius) == {"spark-1": ["vllm"], "spark-2": []}
    assert {n["weight_bytes"] for n in radius["nodes"]} == {0}  # type: ignore[attr-defined]
    assert radius["serving_stops"] is True and radius["last_downtime_s"] == 23.4


def test_an_engine_env_value_restarts_every_engine_container() -> None:
    radius = radius_of({"env": {"NCCL_DEBUG": "WARN"}})
    assert restarts(radius) == {"spark-1": ["ray-head", "vllm"], "spark-2": ["ray-worker"]}


def test_another_model_moves_each_nodes_weights_and_names_both() -> None:
    raw = cluster("sim-2")
    raw["model"] = "gemma-3-27b"
    planned = plan_of("sim-2", raw)
    radius = blast_radius(planned, footprint(DEPLOYED))
    assert radius.model == (f"{DEPLOYED.serving.model}@main", f"{planned.serving.model}@main")
    assert DEPLOYED.serving.model != planned.serving.model
    assert {n.weight_bytes for n in radius.nodes} == {planned.fit.weight_bytes}


def test_the_rollout_generation_follows_any_engine_container_change() -> None:
    raw = cluster("sim-2")
    raw["serving"]["max_model_len"] = 65536
    assert engine_digest(plan_of("sim-2", raw)) != engine_digest(DEPLOYED)
    assert engine_digest(plan_of("sim-2", cluster("sim-2"))) == engine_digest(DEPLOYED)


def fake_pulumi(tmp_path: Path, outputs: dict[str, object], status: int = 0) -> Path:
    """A `pulumi` on PATH that prints these stack outputs (the unit tests run no engine)."""
    binary = tmp_path / "bin" / "pulumi"
    binary.parent.mkdir()
    binary.write_text(f"#!/bin/sh\ncat <<'EOF'\n{json.dumps(outputs)}\nEOF\nexit {status}\n")
    binary.chmod(0o755)
    return binary.parent


def test_the_cli_reads_the_deployed_footprint_and_prints_the_radius(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    raw = cluster("sim-2")
    raw["serving"]["max_model_len"] = 65536
    stacks = stacks_dir_with(tmp_path, "sim-2", raw)
    engine = footprint(DEPLOYED).model_dump(mode="json")
    outputs: dict[str, object] = {"engine": engine, "last_rollout_downtime_s": 31.5}
    path = f"{fake_pulumi(tmp_path, outputs)}{os.pathsep}{os.environ['PATH']}"
    monkeypatch.setenv("PATH", path)
    argv = ["plan", "--stack", "sim-2", "--stacks-dir", str(stacks), "--against"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "spark-1  vllm" in text
    assert "drains (up to 120 s for the requests in flight)" in text
    assert "the last rollout was down 31.5 s" in text
    assert main([*argv, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["serving_stops"] is True


def test_a_stack_never_deployed_is_said_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    stacks = stacks_dir_with(tmp_path, "sim-2", cluster("sim-2"))
    monkeypatch.setenv("PATH", f"{fake_pulumi(tmp_path, {})}{os.pathsep}{os.environ['PATH']}")
    assert main(["plan", "--stack", "sim-2", "--stacks-dir", str(stacks), "--against"]) == 1
    err = capsys.readouterr().err
    assert err.splitlines() == [
        "sparkrack plan --against: stack sim-2: no engine in its outputs (never deployed by `up`?)"
    ]

"""The inference role's resource graph under Pulumi's mocks: what runs where, and in what order."""

from __future__ import annotations

from typing import Any

import pytest

from .harness import deployable_cluster, run_program

pytestmark = pytest.mark.program


def by_name(stack: str) -> dict[str, Any]:
    return {r.name: r for r in run_program(stack, deployable_cluster(stack)).mocks.resources}


def test_sim2_runs_ray_on_both_nodes_and_vllm_on_the_head() -> None:
    found = by_name("sim-2")
    assert {"spark-1-inference", "spark-2-inference", "spark-1-inference-serve"} <= set(found)
    containers = sorted(
        name
        for name, r in found.items()
        if r.typ.endswith(":Container")
        and r.inputs["image"] == "localhost/sparkrack/engine-standin:latest"
    )
    assert containers == ["spark-1-ray-head", "spark-1-vllm", "spark-2-ray-worker"]
    head, worker = found["spark-1-ray-head"].inputs, found["spark-2-ray-worker"].inputs
    assert head["command"][:3] == ["ray", "start", "--head"]
    assert "--address=198.18.0.11:6379" in worker["command"]
    assert found["spark-1-vllm"].inputs["command"][:2] == ["vllm", "serve"]


def test_sim2_loads_the_image_from_here_and_ships_it_from_the_head() -> None:
    found = by_name("sim-2")
    assert found["spark-1-engine-image"].typ.endswith(":ControlImage")
    shipped = found["spark-2-engine-image"].inputs
    assert shipped["source"]["node"] == "spark-1"
    assert shipped["source"]["to"].startswith("198.19.")  # over the fabric


def test_gb10_2_builds_the_image_on_the_head() -> None:
    found = by_name("gb10-2")
    head_image = found["spark-1-engine-image"]
    assert head_image.typ.endswith(":Image")
    assert "FROM docker.io/vllm/vllm-openai" in head_image.inputs["containerfile"]


def test_readiness_gates_the_workers_and_vllm() -> None:
    found = by_name("sim-2")
    assert found["spark-1-ray-head-ready"].inputs["nodes"] == 1
    assert found["spark-1-ray-cluster"].inputs["nodes"] == 2
    assert found["spark-1-served-model"].inputs["model"] == "minimax-m2.7-awq"

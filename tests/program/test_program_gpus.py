"""Every container that computes on or reads the GPU gets it the NVIDIA way, by CDI name, on
every stack, the simulated one too (its nodes have fake GPU devices and a CDI spec); none mounts
nvidia-smi itself: the spec brings it."""

from __future__ import annotations

from typing import Any

import pytest

from sparkrack.stackspec.serving import is_pinned

from .harness import deployable_cluster, run_program

pytestmark = pytest.mark.program

GPU_CONTAINERS = ("ray-head", "ray-worker", "vllm", "gpu-exporter")
OTHER_CONTAINERS = ("node-exporter", "rdma-textfile", "cadvisor", "prometheus", "grafana")
CDI_ALL = "nvidia.com/gpu=all"


def containers(stack: str) -> list[Any]:
    resources = run_program(stack, deployable_cluster(stack)).mocks.resources
    return [r for r in resources if r.typ.endswith(":Container")]


@pytest.mark.parametrize("stack", ["gb10-2", "gb10-16", "h200-2", "sim-2"])
def test_every_gpu_container_gets_the_cdi_device(stack: str) -> None:
    found = containers(stack)
    gpu = [c for c in found if c.inputs["name"] in GPU_CONTAINERS]
    assert {c.inputs["name"] for c in gpu} >= {"ray-head", "ray-worker", "vllm", "gpu-exporter"}
    for container in gpu:
        assert CDI_ALL in container.inputs["devices"], container.name
        assert not any("nvidia-smi" in option for option in container.inputs["options"])
    for container in found:
        if container.inputs["name"] in OTHER_CONTAINERS:
            assert CDI_ALL not in container.inputs["devices"], container.name


ENGINE_CONTAINERS = ("ray-head", "ray-worker", "vllm")
REAL_STACKS = ["gb10-2", "gb10-16", "h200-2"]


def staged(stack: str) -> Any:
    cluster = deployable_cluster(stack)
    cluster["serving"]["weights"] = {"source": "directory", "directory": "/srv/ckpt"}
    return cluster


@pytest.mark.parametrize("stack", REAL_STACKS)
def test_with_staged_weights_every_engine_container_runs_with_the_hub_offline(stack: str) -> None:
    """No node downloads the model by itself: each serves the staged copy, as the program wires
    it; without staged weights the operator fills the model directory, and the Hub is theirs."""
    resources = run_program(stack, staged(stack)).mocks.resources
    engine = [r for r in resources if r.typ.endswith(":Container")]
    engine = [c for c in engine if c.inputs["name"] in ENGINE_CONTAINERS]
    assert {c.inputs["name"] for c in engine} == set(ENGINE_CONTAINERS)
    for container in engine:
        env = container.inputs["env"]
        assert (env["HF_HUB_OFFLINE"], env["TRANSFORMERS_OFFLINE"]) == ("1", "1"), container.name
    unstaged_cluster = deployable_cluster(stack)
    del unstaged_cluster["serving"]["weights"]  # the real stacks stage by default (issue 31)
    resources = run_program(stack, unstaged_cluster).mocks.resources
    unstaged = [r for r in resources if r.typ.endswith(":Container")]
    unstaged = [c for c in unstaged if c.inputs["name"] in ENGINE_CONTAINERS]
    assert unstaged and all("HF_HUB_OFFLINE" not in c.inputs["env"] for c in unstaged)


@pytest.mark.parametrize("stack", REAL_STACKS)
def test_every_engine_container_runs_a_pinned_image(stack: str) -> None:
    engine = [c for c in containers(stack) if c.inputs["name"] in ENGINE_CONTAINERS]
    assert engine
    for container in engine:
        assert is_pinned(container.inputs["image"]), (container.name, container.inputs["image"])

"""Every container that computes on or reads the GPU gets it the NVIDIA way, by CDI name, on
every stack, the simulated one too (its nodes have fake GPU devices and a CDI spec); none mounts
nvidia-smi itself: the spec brings it."""

from __future__ import annotations

from typing import Any

import pytest

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

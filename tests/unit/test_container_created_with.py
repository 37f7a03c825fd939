"""What a running container was created with, read from its inspect record's CreateCommand, and
how the Container resource reports its devices and limits from it (hand-written records: the
two shapes of command line sparkrack's units produce)."""

from __future__ import annotations

from typing import Any

import pytest

from sparkrack.facts.podman import created_with
from sparkrack.resources.podman_reads import created_devices, created_ulimits

pytestmark = pytest.mark.unit

GPU, RDMA = "nvidia.com/gpu=all", "/dev/infiniband"
# The plain unit's `podman run` (options as --opt=value) and Quadlet's (--opt value).
MEMLOCK = "memlock=8388608:8388608"
PLAIN = ["/usr/bin/podman", "run", "--rm", "--name", "ray-worker", f"--device={GPU}",
         f"--device={RDMA}", f"--ulimit={MEMLOCK}", "image", "ray", "start"]  # fmt: skip
QUADLET = ["/usr/bin/podman", "run", "--name", "ray-worker", "--device", GPU, "--device", RDMA,
           "--ulimit", MEMLOCK, "image"]  # fmt: skip


def record(command: list[str]) -> dict[str, Any]:
    return {"Config": {"CreateCommand": command, "Env": []}}


@pytest.mark.parametrize("command", [PLAIN, QUADLET], ids=["plain-unit", "quadlet"])
def test_options_are_read_in_either_form(command: list[str]) -> None:
    assert created_with(record(command), "--device") == [GPU, RDMA]
    assert created_with(record(command), "--ulimit") == ["memlock=8388608:8388608"]
    assert created_with(record(command), "--cpuset-cpus") == []


def test_a_record_without_its_command_reads_as_created_with_nothing() -> None:
    assert created_with({"Config": {}}, "--device") == []


def test_a_dropped_gpu_reads_as_the_declared_devices_without_it() -> None:
    without_gpu = record([word for word in PLAIN if GPU not in word])
    assert created_devices(record(PLAIN), [GPU, RDMA]) == [GPU, RDMA]
    assert created_devices(without_gpu, [GPU, RDMA]) == [RDMA]
    assert created_devices(record([*PLAIN[:2], "--device=/dev/fuse"]), []) == ["/dev/fuse"]


def test_limits_are_read_for_the_declared_names_only() -> None:
    wanted = {"memlock": "8388608:8388608"}
    assert created_ulimits(record(PLAIN), wanted) == wanted
    assert created_ulimits(record(PLAIN[:5]), wanted) == {}

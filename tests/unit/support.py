"""Helpers for the unit tests: the shipped stacks as raw config, planning a changed copy, and
the outputs captured in the facts' golden cases."""

from __future__ import annotations

import copy
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkrack.config.load import SPEC_KEY, spec_from_config
from sparkrack.plan import Plan, make_plan
from sparkrack.stackspec.errors import SpecError

STACKS = Path(__file__).resolve().parents[2] / "stacks"
FACT_CASES = Path(__file__).resolve().parent / "golden" / "facts"
SHIPPED = ("gb10-2", "gb10-16", "h200-2", "sim-2", "sim-16")

Cluster = dict[str, Any]


def captured_output(case: str) -> str:
    """The `output` of golden/facts/<case>.yaml: what the fact's command printed there."""
    output: str = yaml.safe_load((FACT_CASES / f"{case}.yaml").read_text())["output"]
    return output


@cache
def _shipped(stack: str) -> Cluster:
    document = yaml.safe_load((STACKS / f"Pulumi.{stack}.yaml").read_text())
    cluster: Cluster = document["config"][SPEC_KEY]
    return cluster


def cluster(stack: str) -> Cluster:
    """A fresh, mutable copy of a shipped stack's `sparkrack:cluster` value."""
    return copy.deepcopy(_shipped(stack))


# What a real stack must add to a catalogue model whose repository is unknown: made up for the
# tests, so that a shipped real stack can be deployed under mocks.
NAMED_MODEL = {"hf_repo": "test-org/model", "revision": "0123456789abcdef0123456789abcdef01234567"}


def named_model(stack: str) -> Cluster:
    """A shipped stack with its model's repository and commit named, as a real rack needs."""
    raw = cluster(stack)
    raw["model"] = {"catalog": raw["model"], **NAMED_MODEL}
    return raw


def stacks_dir_with(tmp_path: Path, stack: str, raw: Cluster) -> Path:
    """A stacks directory holding `raw` as `stack`'s file (for the CLI, which reads files)."""
    document = yaml.safe_load((STACKS / f"Pulumi.{stack}.yaml").read_text())
    document["config"][SPEC_KEY] = raw
    (tmp_path / f"Pulumi.{stack}.yaml").write_text(yaml.safe_dump(document))
    return tmp_path


def plan_of(stack: str, raw: Cluster) -> Plan:
    return make_plan(spec_from_config(stack, raw, base_dir=STACKS))


def refusal(stack: str, raw: Cluster) -> str:
    """The message with which sparkrack refuses `raw` (from loading or from planning)."""
    with pytest.raises(SpecError) as refused:
        plan_of(stack, raw)
    return str(refused.value)


# Seed 001's NCCL set: both PCIe halves of the port, merged, crossed cables, the RoCEv2 GID, 4 QPs,
# bootstrap on the management NIC; and the INFO level whose NET/IB line verification reads.
SEED_001_NCCL = {
    "NCCL_SOCKET_IFNAME": "enP7s7",
    "NCCL_DEBUG": "INFO",
    "NCCL_DEBUG_SUBSYS": "INIT,NET",
    "NCCL_IB_HCA": "rocep1s0f0,roceP2p1s0f0",
    "NCCL_IB_MERGE_NICS": "1",
    "NCCL_CROSS_NIC": "1",
    "NCCL_IB_GID_INDEX": "3",
    "NCCL_IB_QPS_PER_CONNECTION": "4",
}


# How a resource reaches its node, as the roles pass it (unit tests never connect).
CONNECTION = {
    "node": "spark-2",
    "connection": {
        "host": "198.18.0.12",
        "port": 22,
        "user": "sparkrack",
        "key_path": "/k",
        "known_hosts": "/kh",
    },
}


def gpu_device_nodes(dev: Path, names: tuple[str, ...] = ("nvidiactl", "nvidia0")) -> Path:
    """A /dev holding the GPU's device nodes by name: links to /dev/null, a character device
    anyone may stat, so no mknod (and no root) is needed. Returns `dev`."""
    dev.mkdir(parents=True, exist_ok=True)
    for name in names:
        (dev / name).symlink_to("/dev/null")
    return dev

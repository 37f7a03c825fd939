"""The real Pulumi CLI and Python language host run sparkrack's program on the shipped stacks."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from sparkrack.load import load_stack_file
from sparkrack.plan import make_plan

from .conftest import REPO, PulumiProject, shipped_cluster

pytestmark = pytest.mark.e2e


def stack_outputs(events: list[dict[str, Any]]) -> dict[str, Any]:
    """The stack's outputs as the engine last reported them."""
    reported = [
        e["resOutputsEvent"]["metadata"]["new"]
        for e in events
        if "resOutputsEvent" in e
        and e["resOutputsEvent"]["metadata"]["type"] == "pulumi:pulumi:Stack"
    ]
    assert reported, "the engine reported no outputs for the stack"
    outputs: dict[str, Any] = reported[-1]["outputs"]
    return outputs


def summary(events: list[dict[str, Any]]) -> dict[str, Any]:
    summaries: list[dict[str, Any]] = [e["summaryEvent"] for e in events if "summaryEvent" in e]
    assert len(summaries) == 1, "the engine reported no summary"
    return summaries[0]


def test_engine_is_the_pinned_version(project: PulumiProject) -> None:
    pinned = (REPO / "tools" / "pulumi-engine" / "go.mod").read_text()
    version = project.run("version").stdout.strip()
    assert f"github.com/pulumi/pulumi/pkg/v3 {version}" in pinned


@pytest.mark.parametrize("stack", ["sim-2", "gb10-16"])
def test_preview_reports_the_plan(project: PulumiProject, stack: str) -> None:
    project.run("stack", "init", stack)

    events = project.preview_events(stack)

    expected = make_plan(load_stack_file(stack, REPO / "stacks"))
    outputs = stack_outputs(events)
    assert outputs["plan_digest"] == expected.digest()
    assert outputs["nodes"] == [node.name for node in expected.nodes]
    assert summary(events)["isPreview"] is True
    assert summary(events)["result"] == "succeeded"


def test_preview_refuses_a_bad_stack_with_a_clear_message(project: PulumiProject) -> None:
    cluster = copy.deepcopy(shipped_cluster("sim-2"))
    cluster["serving"].setdefault("env", {})["NCCL_IB_DISABLE"] = "1"
    project.write_stack("sim-bad", cluster)
    project.run("stack", "init", "sim-bad")

    refused = project.run("preview", "--stack", "sim-bad", check=False)

    output = refused.stdout + refused.stderr
    assert refused.returncode != 0
    assert "stack sim-bad" in output
    assert "NCCL_IB_DISABLE" in output
    assert "Traceback" not in output, output

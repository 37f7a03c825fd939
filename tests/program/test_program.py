"""The program under Pulumi's mocks: it wires every shipped stack and refuses bad ones early."""

from __future__ import annotations

import copy

import pulumi
import pytest

from sparkrack.load import load_stack_file
from sparkrack.plan import make_plan

from .harness import REPO, RecordingMocks, run_program, stack_cluster

pytestmark = pytest.mark.program

SHIPPED_STACKS = sorted(p.name.split(".")[1] for p in (REPO / "stacks").glob("Pulumi.*.yaml"))


def test_every_design_stack_ships() -> None:
    assert {"gb10-2", "gb10-16", "h200-2", "sim-2", "sim-16"} <= set(SHIPPED_STACKS)


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_program_exports_the_plan_the_cli_computes(stack: str) -> None:
    run = run_program(stack, stack_cluster(stack))

    expected = make_plan(load_stack_file(stack, REPO / "stacks"))
    assert run.outputs["plan_digest"] == expected.digest()
    assert run.outputs["nodes"] == [node.name for node in expected.nodes]


def test_bad_stack_stops_before_any_resource() -> None:
    cluster = copy.deepcopy(stack_cluster("sim-2"))
    cluster["serving"].setdefault("env", {})["NCCL_IB_DISABLE"] = "1"

    mocks = RecordingMocks()

    with pytest.raises(pulumi.RunError) as refused:
        run_program("sim-2", cluster, mocks)

    message = str(refused.value)
    assert "stack sim-2" in message
    assert "NCCL_IB_DISABLE" in message
    assert mocks.resources == []

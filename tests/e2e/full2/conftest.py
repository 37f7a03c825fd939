"""The package's rack: sim-2's private copy, and the full program's `pulumi up` from fresh nodes
with `serving.weights` (a synthetic checkpoint on the head, shipped whole to both nodes: TP=2,
no pipeline stages to split it by), ending with the verification as every real `up` does."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sparkrack.load import load_stack_file
from sparkrack.plan import Plan, make_plan
from sparkrack.sim.topology import SimTopology
from tests.e2e.conftest import PulumiProject, make_project
from tests.e2e.sim_fixtures import engine_rack, first_up, ssh
from tests.e2e.weights_checks import CHECKPOINT, checkpoint_command

from .rack import PREFIX, STACK, TIMES

UP_TIMEOUT_S = 1200


@pytest.fixture(scope="package")
def sim() -> Iterator[SimTopology]:
    yield from engine_rack("sim-2", STACK, PREFIX)
    print(f"wall times on {STACK}: {TIMES}")


@pytest.fixture(scope="package")
def deploy(tmp_path_factory: pytest.TempPathFactory, sim: SimTopology) -> PulumiProject:
    project = make_project(tmp_path_factory.mktemp("full2"))
    ssh(STACK, "spark-1", checkpoint_command(8, 3, 2**20))
    weights = {"weights": {"source": "directory", "directory": CHECKPOINT}}
    TIMES["up"] = first_up(project, "sim-2", STACK, PREFIX, UP_TIMEOUT_S, weights, verify=True)
    return project


@pytest.fixture(scope="package")
def plan(deploy: PulumiProject) -> Plan:
    return make_plan(load_stack_file(STACK, deploy.root / "stacks"))

"""The package's rack: sim-2's private copy, and the full program's `pulumi up` from fresh nodes
with `serving.weights` (a synthetic checkpoint on the head, shipped whole to both nodes: TP=2,
no pipeline stages to split it by), ending with the verification as every real `up` does."""

from __future__ import annotations

from collections.abc import Generator, Iterator

import pytest

from sparkrack.config.load import load_stack_file
from sparkrack.plan import Plan, make_plan
from sparkrack.sim.topology import SimTopology
from tests.e2e.conftest import PulumiProject, make_project
from tests.e2e.sim_fixtures import engine_rack, first_up, ssh
from tests.e2e.weights_checks import CHECKPOINT, checkpoint_command

from .rack import PREFIX, STACK, TIMES

UP_TIMEOUT_S = 1200
FAILED = pytest.StashKey[bool]()


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


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.when == "call" and report.failed:
        item.stash[FAILED] = True
    return report


@pytest.fixture(autouse=True)
def repaired_after_a_failure(
    request: pytest.FixtureRequest, deploy: PulumiProject
) -> Iterator[None]:
    """A failed test's fault may still be on the rack: one `up` puts it back, as it would for an
    operator, so the package's later tests start from a converged rack and fail only for their
    own reasons (in CI, a port left down by one test failed the three after it)."""
    yield
    if request.node.stash.get(FAILED, False):
        deploy.run("up", "--stack", STACK, "--yes", "--skip-preview", check=False)

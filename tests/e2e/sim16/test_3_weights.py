"""Layer-aware weight shipping on sixteen nodes through the real engine, on the package's rack split
TP=2 x PP=8 (its own project and state, beside the full deployment of test_2_full), so that the
head feeds the first node of every stage and each stage's second node gets its files from the
first, worker to worker (the head's agent forwarded for the copy).

A synthetic checkpoint (an index and 12 shards of 1 MiB over the plan's layers, most stages
starting inside a shard) is made on the head; the weights program (programs/weights: base, fabric,
then each node's ModelWeights; no Ray) ships it. One rack serves the module, each test starting
where the last left it:

1. up: each of the 16 nodes holds exactly its stage's files (sha256), the stages worked out here
   from the checkpoint's own rule, not from sparkrack.plan.weights; the bytes every node sent
   over its fabric ports are measured: node 1's and every worker's match what the schedule has
   it send (the stages' first nodes, worker to worker), a node it has sending nothing sent no file;
2. a refreshing preview changes nothing;
3. a shard deleted on a stage's second node: `preview --refresh` names that node's ModelShards
   and no other, and `up` puts it back from the stage's first node (whose fabric tx grows by it).

About 3 minutes here.
"""

from __future__ import annotations

import posixpath
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from itertools import pairwise
from typing import Any, TypeVar

import pytest

from sparkrack.plan import Plan
from sparkrack.sim.topology import SimTopology
from tests.e2e.conftest import PulumiProject
from tests.e2e.sim_fixtures import as_service, ssh
from tests.e2e.weights_checks import (
    CHECKPOINT,
    FRAMING_SLACK,
    NOT_SHARDS,
    expect_clean,
    fabric_tx,
    listing,
    make_checkpoint,
    refreshing_changes,
    schedule,
    sent_by,
    sizes,
    snapshot,
    stack_plan,
    stage_cluster,
    weights_project,
    within_framing,
)

from .conftest import PREFIX, STACK

pytestmark = pytest.mark.e2e

TP, PP = 2, 8
SHARDS, SHARD_BYTES = 12, 2**20
T = TypeVar("T")


def config() -> Any:
    return stage_cluster("sim-16", STACK, PREFIX, TP, PP)


def plan() -> Plan:
    return stack_plan(STACK, config())


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory, sim16: SimTopology) -> PulumiProject:
    return weights_project(tmp_path_factory.mktemp("weights16"), STACK, config())


def shard_name(k: int) -> str:
    return f"model-{k + 1:05d}-of-{SHARDS:05d}.safetensors"


def expected_files(the_plan: Plan) -> dict[str, frozenset[str]]:
    """node -> its stage's files, by the checkpoint's rule (layer l in shard l * S // L, the
    embedding in the first shard, the LM head and norm in the last) and the plan's stages."""
    stages = the_plan.layout.stages
    layers = sum(stage.layers for stage in stages)
    found = {}
    for stage in stages:
        held = range(stage.first_layer, stage.first_layer + stage.layers)
        shards = {layer * SHARDS // layers for layer in held}
        shards |= {0} if stage.index == 0 else set()
        shards |= {SHARDS - 1} if stage.index == len(stages) - 1 else set()
        for node in stage.nodes:
            found[node] = frozenset(map(shard_name, shards)) | NOT_SHARDS
    return found


def per_node(read: Callable[[str], T], nodes: list[str]) -> dict[str, T]:
    """`read` of every node, a few at a time: one SSH connection each, mostly waiting."""
    with ThreadPoolExecutor(8) as pool:
        return dict(zip(nodes, pool.map(read, nodes), strict=True))


def all_fabric_tx(the_plan: Plan) -> dict[str, int]:
    nodes = {node.name: node for node in the_plan.nodes}
    return per_node(lambda name: fabric_tx(STACK, nodes[name]), list(nodes))


def test_1_up_ships_each_node_its_stage_and_workers_pass_on(project: PulumiProject) -> None:
    the_plan = plan()
    head, layers = the_plan.head_node, sum(s.layers for s in the_plan.layout.stages)
    make_checkpoint(STACK, head, layers, SHARDS, SHARD_BYTES)
    source, files = listing(STACK, head, CHECKPOINT), sizes(STACK, head, CHECKPOINT)
    needs = expected_files(the_plan)
    stage_files = [needs[stage.nodes[0]] - NOT_SHARDS for stage in the_plan.layout.stages]
    assert len(set(stage_files)) == PP
    assert any(a & b for a, b in pairwise(stage_files)), "no shard spans a stage boundary"
    before = all_fabric_tx(the_plan)
    started = time.monotonic()
    project.run("up", "--stack", STACK, "--yes", "--skip-preview", timeout=1800)
    print(f"up: {time.monotonic() - started:.0f} s")
    after = all_fabric_tx(the_plan)
    sent = {node: after[node] - before[node] for node in after}
    held = per_node(lambda node: listing(STACK, node, snapshot(the_plan)), sorted(needs))
    for node, names in needs.items():
        assert held[node] == {name: source[name] for name in names}, node
    counted = sent_by(schedule(the_plan, needs), files)
    print(f"fabric tx per node {sent}; the schedule's {counted}")
    print(f"checkpoint {sum(files.values())} B in {len(files)} files")
    workers = sorted(set(counted) - {head})
    assert workers == [stage.nodes[0] for stage in the_plan.layout.stages[1:]]
    for node in [head, *workers]:
        assert within_framing(sent[node], counted[node]), (node, sent[node], counted[node])
    for node in set(sent) - set(counted):  # nor a file from a node the schedule has sending none
        assert sent[node] < FRAMING_SLACK, (node, sent[node])


def test_2_refreshing_preview_changes_nothing(project: PulumiProject) -> None:
    expect_clean(project, STACK)


def test_3_a_deleted_shard_is_drift_on_its_node_and_up_fetches_it_from_its_peer(
    project: PulumiProject,
) -> None:
    the_plan = plan()
    first, second = the_plan.layout.stages[1].nodes
    shards = sorted(n for n in listing(STACK, second, snapshot(the_plan)) if n not in NOT_SHARDS)
    name, directory = shards[0], snapshot(the_plan)
    good = listing(STACK, second, directory)[name]
    ssh(STACK, second, as_service(f"rm -f {posixpath.join(directory, name)}"))
    changes = refreshing_changes(project, STACK)
    assert changes == {f"{second}-model-shards": ("update", ["files"])}, changes
    peer = the_plan.node(first)
    before = fabric_tx(STACK, peer)
    project.run("up", "--stack", STACK, "--yes", "--skip-preview", timeout=900)
    assert listing(STACK, second, directory)[name] == good
    assert within_framing(fabric_tx(STACK, peer) - before, SHARD_BYTES)

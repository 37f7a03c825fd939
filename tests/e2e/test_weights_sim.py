"""Layer-aware weight shipping through the real engine, on a private copy of sim-2 split into two
pipeline stages (PP=2, TP=1): sim-16 runs in tests/bench/weights_sim16.py, this machine is too
small to bring its 16 nodes through the roles in an e2e run alongside the others.

A synthetic checkpoint (an index and 7 shards of 2 MiB, one shard holding layers of both stages)
is made on the head; the weights program (programs/weights: base, fabric, then each node's
ModelWeights) ships it. One rack serves the module, each test starting where the last left it:

1. up: each node's model dir holds exactly its stage's files, byte for byte; the bytes the head
   sent over its fabric ports are measured and match the schedule's own count;
2. a second up and a refreshing preview change nothing;
3. a shard altered on one node, then one deleted: `preview --refresh` names that node's
   ModelShards and no other; `up` repairs each; the next refreshing preview is clean;
4. destroy keeps every shard on the nodes (retain on delete).
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Iterator
from typing import Any

import pytest

from sparkrack.load import spec_from_config
from sparkrack.plan import Plan, make_plan
from sparkrack.plan.weights import node_shards, ship_tree, tree_schedule
from sparkrack.sim import cluster
from sparkrack.sim.topology import SimTopology

from .conftest import REPO, PulumiProject, make_project
from .programs import PROGRAMS
from .programs.weights.checkpoint import make_command
from .sim_fixtures import planned_changes, private_cluster, require_host_tools, shipped_rack, ssh

pytestmark = pytest.mark.e2e

STACK, PREFIX = "e2e-w2", "198.18.18"
CHECKPOINT = "/home/sparkrack/ckpt"
SHARDS, SHARD_BYTES = 7, 2 * 2**20
SNAPSHOT = (
    "/home/sparkrack/.cache/huggingface/hub/models--PLACEHOLDER--MiniMax-M2.7-AWQ/snapshots/main"
)
STATE: dict[str, Any] = {}


def stack_cluster() -> Any:
    config = private_cluster("sim-2", STACK, PREFIX)
    config["serving"] |= {"pipeline_parallel_size": 2, "tensor_parallel_size": 1}
    config["serving"]["weights"] = {"source": "directory", "directory": CHECKPOINT}
    return config


def plan() -> Plan:
    return make_plan(spec_from_config(STACK, stack_cluster(), base_dir=REPO / "stacks"))


@pytest.fixture(scope="module")
def sim() -> Iterator[SimTopology]:
    require_host_tools()
    topology = shipped_rack("sim-2", STACK, PREFIX)
    assert cluster.up(topology, print).healthy
    yield topology
    cluster.down(topology, print)


@pytest.fixture(scope="module")
def weights_project(tmp_path_factory: pytest.TempPathFactory, sim: SimTopology) -> PulumiProject:
    project = make_project(tmp_path_factory.mktemp("weights"), PROGRAMS / "weights")
    project.write_stack(STACK, stack_cluster())
    project.run("stack", "init", STACK)
    return project


def head_tx_bytes(head: str, netdevs: list[str]) -> int:
    paths = " ".join(f"/sys/class/net/{netdev}/statistics/tx_bytes" for netdev in netdevs)
    return sum(int(line) for line in ssh(STACK, head, f"cat {paths}").split())


def listing(node: str) -> dict[str, str]:
    out = ssh(STACK, node, f"cd {SNAPSHOT} && sha256sum -- * 2>/dev/null || true")
    return {name: digest for digest, name in (line.split("  ", 1) for line in out.splitlines())}


def test_1_up_ships_each_stage_exactly_its_files(
    sim: SimTopology, weights_project: PulumiProject
) -> None:
    the_plan = plan()
    head = the_plan.head_node
    weight_map = json.loads(ssh(STACK, head, make_command(CHECKPOINT, 62, SHARDS, SHARD_BYTES)))
    source = listing_of(head, CHECKPOINT)
    needs = node_shards(weight_map, the_plan.layout)
    assert needs["spark-1"] & needs["spark-2"], "the checkpoint should have a shared shard"
    netdevs = [link.netdev for link in the_plan.node(head).links if link.address]
    before = head_tx_bytes(head, netdevs)
    weights_project.run("up", "--stack", STACK, "--yes", "--skip-preview", timeout=1800)
    sent = head_tx_bytes(head, netdevs) - before
    others = {"config.json", "model.safetensors.index.json"}
    for node in ("spark-1", "spark-2"):
        want = {name: source[name] for name in needs[node] | others}
        assert listing(node) == want, node
    files = {name: SHARD_BYTES for name in set(weight_map.values())}
    files |= {name: int(ssh(STACK, head, f"stat -c %s {CHECKPOINT}/{name}")) for name in others}
    everything = {n: frozenset(needs[n] | others) for n in needs}
    tree = ship_tree(the_plan.layout, head)
    counted = sum(files[t.shard] for t in tree_schedule(everything, tree, head))
    STATE["head_bytes"] = (sent, counted)
    print(f"head fabric tx {sent} B; schedule {counted} B; checkpoint {sum(files.values())} B")
    # SSH framing and TCP/IP headers on top; nothing like the whole checkpoint twice
    assert counted <= sent <= counted * 1.1 + 2**20


def listing_of(node: str, directory: str) -> dict[str, str]:
    out = ssh(STACK, node, f"cd {directory} && sha256sum -- *")
    return {name: digest for digest, name in (line.split("  ", 1) for line in out.splitlines())}


def expect_clean(project: PulumiProject) -> None:
    project.run("preview", "--stack", STACK, "--refresh", "--expect-no-changes", timeout=900)


def refreshing_changes(project: PulumiProject) -> dict[str, tuple[str, list[str]]]:
    streaming = {"PULUMI_ENABLE_STREAMING_JSON_PREVIEW": "true"}
    done = project.run(
        "preview", "--stack", STACK, "--refresh", "--json", extra_env=streaming, timeout=900
    )
    return planned_changes(done.stdout)


def test_2_second_up_and_refresh_change_nothing(weights_project: PulumiProject) -> None:
    done = weights_project.run("up", "--stack", STACK, "--yes", "--expect-no-changes", timeout=900)
    assert done.returncode == 0
    expect_clean(weights_project)


@pytest.mark.parametrize(
    "damage",
    [
        "printf X | dd of={path} bs=1 seek=1000 conv=notrunc status=none",  # same size
        "rm -f {path}",
    ],
)
def test_3_a_damaged_shard_is_drift_on_its_node_and_up_repairs_it(
    weights_project: PulumiProject, damage: str
) -> None:
    name = sorted(n for n in listing("spark-2") if n.endswith(".safetensors"))[0]
    path = posixpath.join(SNAPSHOT, name)
    good = listing("spark-2")[name]
    ssh(STACK, "spark-2", damage.format(path=path))
    changes = refreshing_changes(weights_project)
    assert changes == {"spark-2-model-shards": ("update", ["files"])}, changes
    weights_project.run("up", "--stack", STACK, "--yes", "--skip-preview", timeout=900)
    assert listing("spark-2")[name] == good
    expect_clean(weights_project)


def test_4_destroy_keeps_the_weights(weights_project: PulumiProject) -> None:
    kept = {node: listing(node) for node in ("spark-1", "spark-2")}
    weights_project.run("destroy", "--stack", STACK, "--yes", timeout=1800)
    assert {node: listing(node) for node in ("spark-1", "spark-2")} == kept
    assert all(kept.values())

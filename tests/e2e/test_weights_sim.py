"""Layer-aware weight shipping through the real engine, on a private copy of sim-2 split into two
pipeline stages (PP=2, TP=1). test_weights_sim16 ships on sixteen nodes, worker to worker too;
tests/bench/weights_sim16.py compares a 1 GiB checkpoint against the naive baseline.

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

from sparkrack.plan import Plan
from sparkrack.sim.topology import SimTopology
from tests.weights_schedule import node_shards

from .conftest import PulumiProject
from .programs.weights.checkpoint import make_command
from .programs.weights.fake_hub import hub_command
from .sim_fixtures import as_service, rack, ssh
from .weights_checks import (
    CHECKPOINT,
    NOT_SHARDS,
    expect_clean,
    fabric_tx,
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
from .weights_checks import listing as listing_in

pytestmark = pytest.mark.e2e

STACK, PREFIX = "e2e-w2", "198.18.18"
SHARDS, SHARD_BYTES = 7, 2 * 2**20
STATE: dict[str, Any] = {}


def plan() -> Plan:
    return stack_plan(STACK, stage_cluster("sim-2", STACK, PREFIX, tp=1, pp=2))


@pytest.fixture(scope="module")
def sim() -> Iterator[SimTopology]:
    yield from rack("sim-2", STACK, PREFIX)


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory, sim: SimTopology) -> PulumiProject:
    config = stage_cluster("sim-2", STACK, PREFIX, tp=1, pp=2)
    return weights_project(tmp_path_factory.mktemp("weights"), STACK, config)


def listing(node: str) -> dict[str, str]:
    return listing_in(STACK, node, snapshot(plan()))


def test_1_up_ships_each_stage_exactly_its_files(project: PulumiProject) -> None:
    the_plan = plan()
    head = the_plan.head_node
    weight_map = make_checkpoint(STACK, head, 62, SHARDS, SHARD_BYTES)
    source, files = listing_in(STACK, head, CHECKPOINT), sizes(STACK, head, CHECKPOINT)
    shards = node_shards(weight_map, the_plan.layout)
    assert shards["spark-1"] & shards["spark-2"], "the checkpoint should have a shared shard"
    needs = {node: names | NOT_SHARDS for node, names in shards.items()}
    before = fabric_tx(STACK, the_plan.node(head))
    project.run("up", "--stack", STACK, "--yes", "--skip-preview", timeout=1800)
    sent = fabric_tx(STACK, the_plan.node(head)) - before
    for node in ("spark-1", "spark-2"):
        assert listing(node) == {name: source[name] for name in needs[node]}, node
    counted = sent_by(schedule(the_plan, needs), files)[head]
    STATE["head_bytes"] = (sent, counted)
    print(f"head fabric tx {sent} B; schedule {counted} B; checkpoint {sum(files.values())} B")
    assert within_framing(sent, counted)


def test_2_second_up_and_refresh_change_nothing(project: PulumiProject) -> None:
    done = project.run("up", "--stack", STACK, "--yes", "--expect-no-changes", timeout=900)
    assert done.returncode == 0
    expect_clean(project, STACK)


@pytest.mark.parametrize(
    "damage",
    [
        # Same size, one byte changed: its value plus one, so never the byte already there
        # (writing a fixed 'X' left the random shard as it was 1 time in 256).
        "b=$(od -An -tu1 -j1000 -N1 {path} | tr -d ' '); "
        'printf "\\\\$(printf %03o $(((b + 1) % 256)))" '
        "| dd of={path} bs=1 seek=1000 conv=notrunc status=none",
        "rm -f {path}",
    ],
)
def test_3_a_damaged_shard_is_drift_on_its_node_and_up_repairs_it(
    project: PulumiProject, damage: str
) -> None:
    name = sorted(n for n in listing("spark-2") if n.endswith(".safetensors"))[0]
    path = posixpath.join(snapshot(plan()), name)
    good = listing("spark-2")[name]
    ssh(STACK, "spark-2", as_service(damage.format(path=path)))
    changes = refreshing_changes(project, STACK)
    assert changes == {"spark-2-model-shards": ("update", ["files"])}, changes
    project.run("up", "--stack", STACK, "--yes", "--skip-preview", timeout=900)
    assert listing("spark-2")[name] == good
    expect_clean(project, STACK)


def test_4_destroy_keeps_the_weights(project: PulumiProject) -> None:
    kept = {node: listing(node) for node in ("spark-1", "spark-2")}
    project.run("destroy", "--stack", STACK, "--yes", timeout=1800)
    assert {node: listing(node) for node in ("spark-1", "spark-2")} == kept
    assert all(kept.values())


HUB_TOKEN = "hf_sparkrack-e2e-token-4f1c9a"  # the stand-in hub's, for this test only
# The hub runs as the owner's login, from its home.
HUB_PORT, HUB_REPO, HUB_LOG = 18080, "/home/ubuntu/hub-repo", "/tmp/fake-hub.log"


def start_hub(the_plan: Plan) -> tuple[str, dict[str, str], Any]:
    """A synthetic checkpoint served by the stand-in hub on spark-2: (endpoint, name -> sha256,
    weight_map)."""
    hub = the_plan.node("spark-2")
    weight_map = json.loads(ssh(STACK, hub.name, make_command(HUB_REPO, 62, SHARDS, SHARD_BYTES)))
    repo = the_plan.serving.model
    ssh(STACK, hub.name, hub_command(HUB_REPO, repo, "main", HUB_TOKEN, HUB_PORT, HUB_LOG))
    return f"http://{hub.address}:{HUB_PORT}", listing_in(STACK, hub.name, HUB_REPO), weight_map


def test_5_a_download_needs_the_token_and_keeps_it_secret(project: PulumiProject) -> None:
    """The head downloads from a hub (a stand-in on spark-2), then ships as from a directory. A
    wrong token fails `up`, naming the repo, with nothing half written; the right one, a Pulumi
    secret, brings every node its stage's files and is nowhere in the state or on the head."""
    the_plan = plan()
    head = the_plan.head_node
    endpoint, served, weight_map = start_hub(the_plan)
    for node in ("spark-1", "spark-2"):  # what test 4 kept: this time it comes from the hub
        ssh(STACK, node, as_service(f"rm -rf {snapshot(the_plan)}"))
    weights = {"source": "download", "endpoint": endpoint}
    project.edit_cluster(STACK, lambda cluster: cluster["serving"].update(weights=weights))
    project.run("config", "set", "--secret", "sparkrack:hfToken", "hf_wrong", "--stack", STACK)
    refused = project.run("up", "--stack", STACK, "--yes", "--skip-preview", check=False)
    assert refused.returncode != 0
    assert f"downloading {the_plan.serving.model}" in refused.stdout, refused.stdout[-3000:]
    assert "401" in refused.stdout
    config = stage_cluster("sim-2", STACK, PREFIX, tp=1, pp=2)
    config["serving"]["weights"] = weights
    staged = stack_plan(STACK, config).staging
    assert staged is not None
    download = staged.checkpoint_dir
    left = ssh(STACK, head, f"sudo ls -A {download} 2>/dev/null || true")
    assert left == ""  # nothing half written

    project.run("config", "set", "--secret", "sparkrack:hfToken", HUB_TOKEN, "--stack", STACK)
    project.run("up", "--stack", STACK, "--yes", "--skip-preview", timeout=900)
    assert listing_in(STACK, head, download) == served
    shares = node_shards(weight_map, the_plan.layout)
    for node, shards in shares.items():
        assert listing(node) == {name: served[name] for name in shards | NOT_SHARDS}, node
    # one copy on the head: its share is a link to the download it made (issue 31)
    for name in shares[head] | NOT_SHARDS:
        both = f"{download}/{name} {snapshot(the_plan)}/{name}"
        inodes = ssh(STACK, head, f"sudo stat -c %i {both}").split()
        assert inodes[0] == inodes[1], name
    logged = [json.loads(line) for line in ssh(STACK, "spark-2", f"cat {HUB_LOG}").splitlines()]
    # huggingface_hub asks each file's metadata (HEAD) before its bytes (GET): count the GETs
    fetches = [r for r in logged if r["method"] == "GET" and "/resolve/" in r["path"]]
    fetched = [r["path"] for r in fetches if r["authorized"]]
    assert sorted(posixpath.basename(path) for path in fetched) == sorted(served)  # each once
    assert HUB_TOKEN not in project.run("stack", "export", "--stack", STACK).stdout
    # Nowhere on any node: no file (the hub's own log on spark-2 aside: it records paths and
    # whether a request was authorized, never the token) and no container's environment.
    # The token on stdin, not in sudo's command line: sudo logs that line to the journal.
    places = "/home /tmp /etc /var/log /run /srv"
    on_node = f"printf %s {HUB_TOKEN} | sudo grep -rlF -f - {places} 2>/dev/null || true"
    env = as_service("podman ps -aq | xargs -r podman inspect --format '{{.Config.Env}}'")
    for node in ("spark-1", "spark-2"):
        assert ssh(STACK, node, on_node) == "", node
        assert HUB_TOKEN not in ssh(STACK, node, env), node
    expect_clean(project, STACK)

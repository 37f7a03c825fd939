"""Layer-aware weight distribution: which checkpoint files each node needs, and who sends them.

With pipeline parallelism a stage loads only its layers, so it needs only the safetensors shards
that hold them: read from the checkpoint's `model.safetensors.index.json` (tensor -> shard) and
the Plan's stages. The embedding goes with the first stage, the final norm and the LM head with
the last; any other tensor outside the layers goes everywhere, as do the files that are not
shards (config, tokenizer, the index). Without pipeline parallelism every node needs every file.

Shipping follows a tree fixed by the layout alone (so Pulumi can order the node resources before
the index is known): the head sends to the first node of every stage, and within a stage the
nodes pass the stage's files on in a binomial tree (round r: every node that has them sends to
one that has not). A node takes a file from its nearest ancestor that needs it, else from the
head. So a stage's files leave the head once per stage, not once per node, and a file every
node needs leaves it at most log2(nodes) times (tests/weights_schedule.py models the tree's
rounds, a finer per-shard schedule and the naive baseline, for the tests and the benchmark).
Pure functions: the Plan and the index in, each node's files and their sources out.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from dataclasses import dataclass

from sparkrack.plan.fabric import LinkPlan, Reach, reach_over_fabric
from sparkrack.plan.parallel import ParallelLayout
from sparkrack.stackspec import StrictModel, WeightsSpec

SHARD_SUFFIX = ".safetensors"


def layer_stage(layer: int, layout: ParallelLayout) -> int:
    """The stage that runs `layer`; one past the last layer (an MTP head) is the last stage's."""
    for stage in layout.stages:
        if stage.first_layer <= layer < stage.first_layer + stage.layers:
            return stage.index
    return len(layout.stages) - 1


def contents_stages(contents: Mapping[str, object], layout: ParallelLayout) -> set[int]:
    """The stages that load anything in a shard of these contents (see shard_contents)."""
    last = len(layout.stages) - 1
    layers = contents["layers"]
    assert isinstance(layers, list)
    stages = {layer_stage(int(layer), layout) for layer in layers}
    stages |= {0} if contents["first"] else set()
    stages |= {last} if contents["last"] else set()
    return set(range(last + 1)) if contents["every"] else stages


def node_files(
    contents: Mapping[str, Mapping[str, object]], files: list[str], layout: ParallelLayout
) -> dict[str, frozenset[str]]:
    """node -> the checkpoint files it needs: the shards of its stage (from `contents`, see
    shard_contents) and every file that is not a shard (config, tokenizer, the index). A shard
    the index does not name (a stray) goes nowhere."""
    per_stage: list[set[str]] = [
        {name for name in files if not name.endswith(SHARD_SUFFIX)} for _ in layout.stages
    ]
    for shard, held in contents.items():
        for stage in contents_stages(held, layout):
            per_stage[stage].add(shard)
    return {
        node: frozenset(per_stage[stage.index]) for stage in layout.stages for node in stage.nodes
    }


def full_set(layout: ParallelLayout, files: list[str]) -> dict[str, frozenset[str]]:
    """Every node needs every file: no pipeline parallelism, or layer-aware shipping turned off."""
    return {node: frozenset(files) for stage in layout.stages for node in stage.nodes}


# --- the shipping tree ------------------------------------------------------------------------


def binomial_parents(nodes: list[str]) -> dict[str, str]:
    """A binomial broadcast tree over `nodes`, rooted at the first: the node at position p gets
    from position p - 2^floor(log2 p), so in round r every holder sends to one new node."""
    return {nodes[p]: nodes[p - (1 << (p.bit_length() - 1))] for p in range(1, len(nodes))}


def ship_tree(layout: ParallelLayout, origin: str) -> dict[str, str]:
    """node -> the node it is shipped from (every node but the origin). Fixed by the layout
    alone: the origin feeds the first node of every stage, the stage's nodes pass on from there."""
    parents: dict[str, str] = {}
    for stage in layout.stages:
        nodes = list(stage.nodes)
        if origin in nodes:
            nodes.remove(origin)
            nodes.insert(0, origin)
        elif nodes:
            parents[nodes[0]] = origin
        parents |= binomial_parents(nodes)
    return parents


def ancestors(tree: Mapping[str, str], node: str) -> list[str]:
    """`node`'s parent, its parent's parent, ... up to the origin."""
    found = []
    while node in tree:
        node = tree[node]
        found.append(node)
    return found


def sources(
    needs: Mapping[str, frozenset[str]], tree: Mapping[str, str], origin: str
) -> dict[str, dict[str, str]]:
    """node -> file -> the node it copies that file from: its nearest ancestor that needs the
    file too (and so holds it first), else the origin, which holds the whole checkpoint."""
    found: dict[str, dict[str, str]] = {}
    for node, files in needs.items():
        if node == origin:
            found[node] = {name: origin for name in files}
            continue
        line = ancestors(tree, node)
        found[node] = {
            name: next((a for a in line if name in needs.get(a, ())), origin) for name in files
        }
    return found


# --- where the staged weights live and how each node's sources are reached ----------------------


class WeightRoute(StrictModel):
    """How the head reaches one source of a node's files: the source's directory, the source's
    address as the head sees it ("" for the head itself) and the node's address from there
    (`to`; on a DHCP rail "", and `to_lease` the node's netdev whose lease the copy reads)."""

    directory: str
    address: str
    to: str
    to_lease: str | None = None


class StagingPlan(StrictModel):
    """The staged checkpoint: where the head holds it, where every node keeps its share (the
    Hugging Face cache layout vLLM finds offline), and each node's routes to its sources."""

    checkpoint_dir: str  # on the head
    repo_dir: str  # on every node: <model dir>/hub/models--<owner>--<name>
    snapshot_dir: str  # repo_dir/snapshots/<revision>
    routes: dict[str, dict[str, WeightRoute]]  # node -> source node -> route


@dataclass(frozen=True)
class StagingInputs:
    weights: WeightsSpec
    model_dir: str  # the same path on every node
    repo: str
    revision: str
    layout: ParallelLayout
    links: Mapping[str, tuple[LinkPlan, ...]]  # node -> its fabric links
    addresses: Mapping[str, str]  # node -> its management address


def hf_cache_repo(model_dir: str, repo: str) -> str:
    """The repo's folder in a Hugging Face cache (HF_HOME) at `model_dir`."""
    return posixpath.join(model_dir, "hub", "models--" + repo.replace("/", "--"))


def checkpoint_directory(given: StagingInputs) -> str:
    """Where the head holds the whole checkpoint: the stack's directory, or where it downloads
    (beside the cache, in the head's model dir, so a destroy keeps it too)."""
    if given.weights.source == "directory":
        assert given.weights.directory is not None
        return given.weights.directory
    repo = given.repo.replace("/", "--")
    return posixpath.join(given.model_dir, "sparkrack-download", repo, given.revision)


def plan_staging(given: StagingInputs) -> StagingPlan:
    repo_dir = hf_cache_repo(given.model_dir, given.repo)
    snapshot = posixpath.join(repo_dir, "snapshots", given.revision)
    checkpoint = checkpoint_directory(given)
    origin = given.layout.head_node
    tree = ship_tree(given.layout, origin)

    def reach(node: str, source: str) -> Reach:
        return reach_over_fabric(given.links[source], given.links[node], given.addresses[node])

    def route(directory: str, address: str, to: Reach) -> WeightRoute:
        return WeightRoute(
            directory=directory, address=address, to=to.address, to_lease=to.lease_netdev
        )

    def routes_of(node: str) -> dict[str, WeightRoute]:
        found = {origin: route(checkpoint, "", reach(node, origin))}
        for name in ancestors(tree, node):
            if name != origin:
                # The head only sends the source its command: its management address will do.
                head_to_source = reach(name, origin).address or given.addresses[name]
                found[name] = route(snapshot, head_to_source, reach(node, name))
        return found

    return StagingPlan(
        checkpoint_dir=checkpoint,
        repo_dir=repo_dir,
        snapshot_dir=snapshot,
        routes={node: routes_of(node) for node in given.addresses},
    )

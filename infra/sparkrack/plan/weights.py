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
node needs leaves it at most log2(nodes) times. `fan_out` is the finer per-shard schedule, kept
as the modelled ideal (tests/bench/weights_distribution.py); `naive` is the baseline.
Pure functions: the Plan and the index in, transfers out.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from dataclasses import dataclass

from sparkrack.plan.fabric import LinkPlan, Reach, reach_over_fabric
from sparkrack.plan.parallel import ParallelLayout
from sparkrack.stackspec import StrictModel, WeightsSpec
from sparkrack.text.checkpoint_index import (
    FIRST_STAGE_PREFIXES,
    LAST_STAGE_PREFIXES,
    LAYER,
    shard_contents,
)

SHARD_SUFFIX = ".safetensors"


def layer_stage(layer: int, layout: ParallelLayout) -> int:
    """The stage that runs `layer`; one past the last layer (an MTP head) is the last stage's."""
    for stage in layout.stages:
        if stage.first_layer <= layer < stage.first_layer + stage.layers:
            return stage.index
    return len(layout.stages) - 1


def tensor_stages(tensor: str, layout: ParallelLayout) -> range:
    """The pipeline stages that load `tensor`."""
    last = len(layout.stages) - 1
    found = LAYER.search(tensor)
    if found:
        stage = layer_stage(int(found.group(1)), layout)
        return range(stage, stage + 1)
    if tensor.startswith(FIRST_STAGE_PREFIXES):
        return range(0, 1)
    if tensor.startswith(LAST_STAGE_PREFIXES):
        return range(last, last + 1)
    return range(0, last + 1)


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


def node_shards(weight_map: Mapping[str, str], layout: ParallelLayout) -> dict[str, frozenset[str]]:
    """node -> the shards it needs, from the index's weight_map (tensor -> shard file)."""
    return node_files(shard_contents(weight_map), [], layout)


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


def depth(tree: Mapping[str, str], node: str) -> int:
    return len(ancestors(tree, node))


def tree_schedule(
    needs: Mapping[str, frozenset[str]], tree: Mapping[str, str], origin: str
) -> list[Transfer]:
    """Every file a node other than the origin needs, from its source, in rounds: a node's
    round is its depth in the tree (the round after its parent's has finished)."""
    chosen = sources(needs, tree, origin)
    return [
        Transfer(name, chosen[node][name], node, depth(tree, node))
        for node in sorted(needs, key=lambda n: (depth(tree, n), n))
        if node != origin
        for name in sorted(needs[node])
    ]


@dataclass(frozen=True)
class Transfer:
    shard: str
    source: str
    destination: str
    wave: int  # transfers of one wave run at once: one out and one in per node


def fan_out(
    needs: Mapping[str, frozenset[str]],
    sizes: Mapping[str, int],
    origin: str,
    have: Mapping[str, frozenset[str]] | None = None,
) -> list[Transfer]:
    """Every shard a node needs and does not `have` (the origin has them all), in waves. Each
    wave a node sends at most one shard and receives at most one; a shard comes from a node that
    holds it, the origin last, so the origin's link is not the bottleneck."""
    holders = {shard: {origin} for shard in sizes}
    for node, shards in (have or {}).items():
        for shard in shards:
            holders[shard].add(node)
    pending = [
        (shard, node)
        for node, shards in needs.items()
        for shard in shards
        if node not in holders[shard]
    ]
    transfers: list[Transfer] = []
    wave = 0
    while pending:
        # rarest first: the origin sends what nobody else has, the others pass on the rest
        pending.sort(key=lambda item: (len(holders[item[0]]), -sizes[item[0]], item))
        sending: set[str] = set()
        receiving: set[str] = set()
        left = []
        for shard, node in pending:
            free = sorted(holders[shard] - sending, key=lambda name: (name == origin, name))
            if node in receiving or not free:
                left.append((shard, node))
                continue
            transfers.append(Transfer(shard, free[0], node, wave))
            sending.add(free[0])
            receiving.add(node)
        for transfer in transfers:
            if transfer.wave == wave:
                holders[transfer.shard].add(transfer.destination)
        pending, wave = left, wave + 1
    return transfers


@dataclass(frozen=True)
class Cost:
    bytes_moved: int
    bytes_from_origin: int
    modelled_seconds: float  # each wave as long as its largest shard at `link_bytes_s`


def cost(transfers: list[Transfer], sizes: Mapping[str, int], origin: str, link: float) -> Cost:
    waves: dict[int, int] = {}
    for t in transfers:
        waves[t.wave] = max(waves.get(t.wave, 0), sizes[t.shard])
    return Cost(
        bytes_moved=sum(sizes[t.shard] for t in transfers),
        bytes_from_origin=sum(sizes[t.shard] for t in transfers if t.source == origin),
        modelled_seconds=sum(waves.values()) / link,
    )


def naive(nodes: list[str], sizes: Mapping[str, int], origin: str) -> list[Transfer]:
    """The baseline: every shard to every other node, from the origin, one after another."""
    others = [node for node in nodes if node != origin]
    pairs = [(shard, node) for node in others for shard in sorted(sizes)]
    return [Transfer(shard, origin, node, wave) for wave, (shard, node) in enumerate(pairs)]


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

"""Models of shipping the staged weights, for the tests and the benchmarks: the rounds the
product's shipping tree (sparkrack.plan.weights) runs in, the finer per-shard schedule it is
measured against (`fan_out`, the modelled ideal: tests/bench/weights_distribution.py), the
naive baseline, and a tensor's stages read from its name alone."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from sparkrack.plan.parallel import ParallelLayout
from sparkrack.plan.weights import ancestors, layer_stage, node_files, sources
from sparkrack.text.checkpoint_index import (
    FIRST_STAGE_PREFIXES,
    LAST_STAGE_PREFIXES,
    LAYER,
    shard_contents,
)


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


def node_shards(weight_map: Mapping[str, str], layout: ParallelLayout) -> dict[str, frozenset[str]]:
    """node -> the shards it needs, from the index's weight_map (tensor -> shard file)."""
    return node_files(shard_contents(weight_map), [], layout)


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

"""Benchmark, not a test: layer-aware fan-out against the naive baseline, on sim-16's plan.

A synthetic checkpoint (an index of `--layers` layers over `--shards` shards of equal size,
`--gib` in all, at least 1 GiB) is split by sim-16's pipeline stages; the per-shard fan-out
(tests/weights_schedule.py) is compared with everything to every node from node 1 in series.
Bytes are exact; the wall time is MODELLED, not measured: each wave of parallel transfers lasts
as long as its largest shard at `--gbit` per link (107.8 Gb/s: one RoCE rail, seed 001). With
`--replicate` every node needs every shard (no pipeline parallelism). Run:
    python -m tests.bench.weights_distribution [--gib 1] [--replicate]
"""

from __future__ import annotations

import argparse
import json

from sparkrack.config.load import load_stack_file
from sparkrack.plan import make_plan
from tests.weights_schedule import Cost, cost, fan_out, naive, node_shards

ROCE_RAIL_GBIT = 107.8


def synthetic_index(layers: int, shards: int) -> dict[str, str]:
    name = [f"model-{k + 1:05d}-of-{shards:05d}.safetensors" for k in range(shards)]
    weight_map = {"model.embed_tokens.weight": name[0], "lm_head.weight": name[-1]}
    for layer in range(layers):
        weight_map[f"model.layers.{layer}.mlp.weight"] = name[layer * shards // layers]
    return weight_map


def row(label: str, result: Cost) -> dict[str, object]:
    return {
        "plan": label,
        "bytes_moved": result.bytes_moved,
        "bytes_from_node_1": result.bytes_from_origin,
        "modelled_seconds": round(result.modelled_seconds, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=1.0)
    parser.add_argument("--shards", type=int, default=96)
    parser.add_argument("--gbit", type=float, default=ROCE_RAIL_GBIT)
    parser.add_argument("--replicate", action="store_true")
    args = parser.parse_args()
    if args.gib < 1:
        parser.error("the comparison is specified for a checkpoint of at least 1 GiB")
    plan = make_plan(load_stack_file("sim-16"))
    index = synthetic_index(sum(plan.layout.layer_partition), args.shards)
    size = int(args.gib * 2**30) // args.shards
    sizes = {shard: size for shard in index.values()}
    needs = node_shards(index, plan.layout)
    if args.replicate:
        needs = {node: frozenset(sizes) for node in needs}
    nodes = [node.name for node in plan.nodes]
    link = args.gbit * 1e9 / 8
    ours = cost(fan_out(needs, sizes, plan.head_node), sizes, plan.head_node, link)
    baseline = cost(naive(nodes, sizes, plan.head_node), sizes, plan.head_node, link)
    rows = [row("sparkrack", ours), row("naive: all to all from node 1", baseline)]
    for entry in rows:
        print(json.dumps(entry))
    print(
        f"bytes moved: {ours.bytes_moved / baseline.bytes_moved:.1%} of naive; modelled wall time:"
        f" {ours.modelled_seconds / baseline.modelled_seconds:.1%} of naive"
    )


if __name__ == "__main__":
    main()

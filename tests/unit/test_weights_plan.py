"""Layer-aware shard sets and the fan-out that ships them, on a synthetic checkpoint index."""

from __future__ import annotations

import pytest

from sparkrack.config.load import load_stack_file
from sparkrack.plan import make_plan
from sparkrack.plan.parallel import ParallelLayout
from tests.weights_schedule import cost, fan_out, naive, node_shards, tensor_stages

pytestmark = pytest.mark.unit

SHARDS = 96  # Kimi K3 ships 96 safetensors shards (FACTS)


def shard(k: int) -> str:
    return f"model-{k + 1:05d}-of-{SHARDS:05d}.safetensors"


def synthetic_index(layers: int) -> dict[str, str]:
    """tensor -> shard, layers laid out in order over the shards as checkpoints do."""
    weight_map = {"model.embed_tokens.weight": shard(0)}
    for layer in range(layers):
        for part in ("self_attn.q_proj.weight", "mlp.experts.0.down_proj.weight"):
            weight_map[f"model.layers.{layer}.{part}"] = shard(layer * SHARDS // layers)
    weight_map["model.norm.weight"] = shard(SHARDS - 1)
    weight_map["lm_head.weight"] = shard(SHARDS - 1)
    return weight_map


def sim16() -> ParallelLayout:
    return make_plan(load_stack_file("sim-16")).layout


def test_each_stage_needs_exactly_the_shards_of_its_layers() -> None:
    layout = sim16()
    needs = node_shards(synthetic_index(93), layout)
    assert len(needs) == 16
    for stage in layout.stages:
        layers = range(stage.first_layer, stage.first_layer + stage.layers)
        want = {shard(layer * SHARDS // 93) for layer in layers}
        want |= {shard(0)} if stage.index == 0 else set()
        want |= {shard(SHARDS - 1)} if stage.index == 15 else set()
        (node,) = stage.nodes
        assert needs[node] == want, node


def test_embedding_goes_first_head_last_and_the_unknown_everywhere() -> None:
    layout = sim16()
    assert tensor_stages("model.embed_tokens.weight", layout) == range(0, 1)
    assert tensor_stages("lm_head.weight", layout) == range(15, 16)
    assert tensor_stages("model.layers.92.mlp.gate.weight", layout) == range(15, 16)
    assert tensor_stages("model.layers.5.mlp.gate.weight", layout) == range(1, 2)  # 5,5,6,...
    assert tensor_stages("model.rotary_emb.inv_freq", layout) == range(0, 16)


def test_without_pipeline_parallel_every_node_needs_every_shard() -> None:
    layout = make_plan(load_stack_file("sim-2")).layout
    needs = node_shards(synthetic_index(62), layout)
    assert set(needs) == {"spark-1", "spark-2"}
    assert needs["spark-1"] == needs["spark-2"] == set(synthetic_index(62).values())


def check_schedule(transfers: list, needs: dict, origin: str) -> None:  # type: ignore[type-arg]
    got = {(t.destination, t.shard) for t in transfers}
    want = {(node, s) for node, shards in needs.items() if node != origin for s in shards}
    assert got == want and len(got) == len(transfers)  # each need met exactly once
    held = {(origin, s) for s in {t.shard for t in transfers}}
    for wave in sorted({t.wave for t in transfers}):
        now = [t for t in transfers if t.wave == wave]
        assert all((t.source, t.shard) in held for t in now)  # sent by a holder
        assert len({t.source for t in now}) == len(now) == len({t.destination for t in now})
        held |= {(t.destination, t.shard) for t in now}


def test_fan_out_meets_every_need_from_holders_one_stream_per_node() -> None:
    layout = sim16()
    needs = node_shards(synthetic_index(93), layout)
    sizes = {s: 16 * 2**20 for s in synthetic_index(93).values()}
    check_schedule(fan_out(needs, sizes, "spark-01"), needs, "spark-01")


def test_full_replication_fans_out_instead_of_sending_from_the_head_in_series() -> None:
    nodes = [f"n{i:02d}" for i in range(16)]
    sizes = {shard(k): 2**20 for k in range(8)}
    needs = {node: frozenset(sizes) for node in nodes}
    transfers = fan_out(needs, sizes, "n00")
    check_schedule(transfers, needs, "n00")
    ours, baseline = (
        cost(transfers, sizes, "n00", 1e9),
        cost(naive(nodes, sizes, "n00"), sizes, "n00", 1e9),
    )
    assert ours.bytes_moved == baseline.bytes_moved == 15 * 8 * 2**20
    assert ours.bytes_from_origin < baseline.bytes_from_origin / 4
    assert ours.modelled_seconds < baseline.modelled_seconds / 4


def test_layer_aware_moves_a_sixteenth_of_the_naive_bytes() -> None:
    layout = sim16()
    index = synthetic_index(93)
    sizes = {s: 16 * 2**20 for s in index.values()}
    needs = node_shards(index, layout)
    ours = cost(fan_out(needs, sizes, "spark-01"), sizes, "spark-01", 1e9)
    nodes = [node for stage in layout.stages for node in stage.nodes]
    baseline = cost(naive(nodes, sizes, "spark-01"), sizes, "spark-01", 1e9)
    assert baseline.bytes_moved == 15 * len(sizes) * 16 * 2**20
    # each shard leaves the head about once; boundary shards go on from a neighbour
    assert ours.bytes_moved < baseline.bytes_moved / 12


def test_a_shard_a_node_already_has_is_not_sent_and_it_can_send_it_on() -> None:
    nodes = ["a", "b", "c"]
    sizes = {shard(0): 2**20, shard(1): 2**20}
    needs = {node: frozenset(sizes) for node in nodes}
    transfers = fan_out(needs, sizes, "a", have={"b": frozenset({shard(1)})})
    assert ("b", shard(1)) not in {(t.destination, t.shard) for t in transfers}
    assert [t.source for t in transfers if t.shard == shard(1)] == ["b"]  # not the origin

"""Shard sets from an index summary, and the shipping tree: every node ends with exactly its
files, each from a node that holds it by then, and node 1 sends little."""

from __future__ import annotations

import math
from collections import Counter

import pytest

from sparkrack.config.load import load_stack_file
from sparkrack.plan import make_plan
from sparkrack.plan.parallel import ParallelLayout, Stage
from sparkrack.plan.weights import full_set, node_files, ship_tree, sources
from sparkrack.text.checkpoint_index import shard_contents
from tests.weights_schedule import Transfer, naive, tree_schedule

pytestmark = pytest.mark.unit


def layout(groups: list[list[str]], partition: list[int]) -> ParallelLayout:
    stages, first = [], 0
    for index, (nodes, layers) in enumerate(zip(groups, partition, strict=True)):
        stages.append(Stage(index=index, nodes=tuple(nodes), first_layer=first, layers=layers))
        first += layers
    return ParallelLayout(
        tensor_parallel_size=len(groups[0]),
        pipeline_parallel_size=len(groups),
        chosen_by="stack",
        tp_interconnect="none",
        layer_partition=tuple(partition),
        vllm_pp_layer_partition=",".join(map(str, partition)),
        stages=tuple(stages),
        head_node=groups[0][0],
        ray_head_address=f"{groups[0][0]}:6379",
    )


def index(layers: int, shards: int) -> dict[str, str]:
    """Layers laid out in order over the shards; layer l in shard l * shards // layers."""
    name = [f"model-{k + 1:05d}-of-{shards:05d}.safetensors" for k in range(shards)]
    weight_map = {"model.embed_tokens.weight": name[0], "lm_head.weight": name[-1]}
    weight_map["model.norm.weight"] = name[-1]
    for layer in range(layers):
        for part in ("self_attn.q_proj.weight", "mlp.down_proj.weight"):
            weight_map[f"model.layers.{layer}.{part}"] = name[layer * shards // layers]
    return weight_map


def test_a_shard_spanning_two_stages_goes_to_both() -> None:
    two = layout([["a"], ["b"]], [2, 2])
    weight_map = {
        "model.embed_tokens.weight": "s1",
        "model.layers.0.mlp.weight": "s1",
        "model.layers.1.mlp.weight": "s2",
        "model.layers.2.mlp.weight": "s2",  # s2 holds layer 1 (stage 0) and 2 (stage 1)
        "model.layers.3.mlp.weight": "s3",
        "lm_head.weight": "s3",
    }
    needs = node_files(shard_contents(weight_map), ["config.json"], two)
    assert needs == {"a": {"s1", "s2", "config.json"}, "b": {"s2", "s3", "config.json"}}


def test_the_summary_is_small_and_says_where_each_shard_goes() -> None:
    weight_map = {
        "model.layers.7.a": "x.safetensors",
        "model.layers.9.b": "x.safetensors",
        "model.rotary_emb.inv_freq": "x.safetensors",
        "model.embed_tokens.weight": "y.safetensors",
        "lm_head.weight": "z.safetensors",
    }
    assert shard_contents(weight_map) == {
        "x.safetensors": {"layers": [7, 9], "first": False, "last": False, "every": True},
        "y.safetensors": {"layers": [], "first": True, "last": False, "every": False},
        "z.safetensors": {"layers": [], "first": False, "last": True, "every": False},
    }


def test_non_shard_files_go_everywhere_and_a_stray_shard_nowhere() -> None:
    two = layout([["a"], ["b"]], [1, 1])
    contents = shard_contents({"model.layers.0.w": "s1", "model.layers.1.w": "s2"})
    needs = node_files(contents, ["config.json", "tokenizer.json", "stray.safetensors"], two)
    assert needs["a"] == {"s1", "config.json", "tokenizer.json"}
    assert needs["b"] == {"s2", "config.json", "tokenizer.json"}


def test_sim16_every_stage_gets_its_layers_only() -> None:
    sim16 = make_plan(load_stack_file("sim-16")).layout
    weight_map = index(93, 32)
    needs = node_files(shard_contents(weight_map), [], sim16)
    for stage in sim16.stages:
        (node,) = stage.nodes
        want = {
            weight_map[f"model.layers.{layer}.mlp.down_proj.weight"]
            for layer in range(stage.first_layer, stage.first_layer + stage.layers)
        }
        want |= {weight_map["model.embed_tokens.weight"]} if stage.index == 0 else set()
        want |= {weight_map["lm_head.weight"]} if stage.index == 15 else set()
        assert needs[node] == want, node
    assert any(sum(s in n for n in needs.values()) == 2 for s in set(weight_map.values()))


def nodes16() -> list[str]:
    return [f"n{i:02d}" for i in range(1, 17)]


def origin_sends(transfers: list[Transfer], origin: str) -> Counter[str]:
    return Counter(t.shard for t in transfers if t.source == origin)


def test_full_replication_leaves_node_1_at_most_log2_times_per_file() -> None:
    one = layout([nodes16()], [62])
    files = [f"s{k}" for k in range(8)]
    needs = full_set(one, files)
    transfers = tree_schedule(needs, ship_tree(one, "n01"), "n01")
    check_exact(transfers, needs, "n01")
    assert max(origin_sends(transfers, "n01").values()) == math.ceil(math.log2(16))
    assert max(t.wave for t in transfers) == 4  # 1, 2, 4, 8 new nodes a round


def check_exact(transfers: list[Transfer], needs: dict[str, frozenset[str]], origin: str) -> None:
    held: dict[str, set[str]] = {node: set() for node in needs}
    held[origin] = {t.shard for t in transfers} | set(needs[origin])
    for wave in sorted({t.wave for t in transfers}):
        now = [t for t in transfers if t.wave == wave]
        for t in now:
            assert t.shard in held[t.source], f"{t}: {t.source} does not hold it yet"
            assert t.shard not in held[t.destination], f"{t}: sent twice"
        for t in now:
            held[t.destination].add(t.shard)
    for node in needs:
        if node != origin:
            assert held[node] == needs[node], node


def test_tp_groups_get_each_stage_file_from_node_1_once() -> None:
    groups = [nodes16()[i : i + 4] for i in range(0, 16, 4)]
    four = layout(groups, [15, 16, 16, 15])
    weight_map = index(62, 24)
    needs = node_files(shard_contents(weight_map), ["config.json"], four)
    transfers = tree_schedule(needs, ship_tree(four, "n01"), "n01")
    check_exact(transfers, needs, "n01")
    other_stages = Counter(s for stage in four.stages[1:] for s in needs[stage.nodes[0]])
    for shard, sent in origin_sends(transfers, "n01").items():
        # once to each other stage; within n01's own stage of 4, log2(4) times
        own = math.ceil(math.log2(4)) if shard in needs["n01"] else 0
        assert sent <= other_stages[shard] + own, shard
    assert sum(origin_sends(transfers, "n01").values()) < len(transfers) / 3


def test_pp16_layer_aware_sends_each_shard_from_node_1_once_a_stage() -> None:
    sim16 = make_plan(load_stack_file("sim-16")).layout
    weight_map = index(93, 32)
    needs = node_files(shard_contents(weight_map), [], sim16)
    origin = sim16.head_node
    transfers = tree_schedule(needs, ship_tree(sim16, origin), origin)
    check_exact(transfers, needs, origin)
    per_stage = Counter(s for node, files in needs.items() if node != origin for s in files)
    assert origin_sends(transfers, origin) == per_stage
    assert len(transfers) < 32 + 16  # naive: 15 x 32


def test_the_check_fails_on_a_bad_schedule() -> None:
    one = layout([["a", "b", "c"]], [4])
    needs = full_set(one, ["s"])
    wrong_source = [Transfer("s", "a", "b", 1), Transfer("s", "c", "c", 1)]
    with pytest.raises(AssertionError, match="does not hold"):
        check_exact(wrong_source, needs, "a")
    missing = [Transfer("s", "a", "b", 1)]
    with pytest.raises(AssertionError, match="c"):
        check_exact(missing, needs, "a")
    twice = [Transfer("s", "a", "b", 1), Transfer("s", "a", "b", 2), Transfer("s", "a", "c", 2)]
    with pytest.raises(AssertionError, match="sent twice"):
        check_exact(twice, needs, "a")


def test_naive_sends_everything_from_node_1_and_the_bound_catches_it() -> None:
    files = {f"s{k}": 1 for k in range(8)}
    transfers = naive(nodes16(), files, "n01")
    assert max(origin_sends(transfers, "n01").values()) == 15 > math.ceil(math.log2(16))


def test_a_node_takes_a_file_from_its_nearest_ancestor_that_has_it() -> None:
    groups = [["h", "a"], ["b", "c", "d", "e"]]
    two = layout(groups, [2, 2])
    tree = ship_tree(two, "h")
    assert tree == {"a": "h", "b": "h", "c": "b", "d": "b", "e": "c"}
    needs = {"h": frozenset({"x"}), "a": frozenset({"x"})} | {
        n: frozenset({"y", "x"} if n == "b" else {"y"}) for n in "bcde"
    }
    chosen = sources(needs, tree, "h")
    assert chosen["e"] == {"y": "c"} and chosen["b"] == {"x": "h", "y": "h"}
    assert chosen["d"] == {"y": "b"}

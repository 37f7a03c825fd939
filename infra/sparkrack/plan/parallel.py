"""Parallel layout: tensor parallel within a group of well-connected GPUs, pipeline across groups.

On a multi-GPU server the group is the server's NVLink GPUs; on GB10 it is the nodes behind one
switch port, or the nodes cabled together. Ray's head, and so vLLM's API server, is the first node.
"""

from __future__ import annotations

from typing import Literal

from sparkrack.stackspec import ClusterSpec, ModelSpec, StrictModel
from sparkrack.stackspec.errors import Problem, SpecError

RAY_PORT = 6379


class Stage(StrictModel):
    index: int
    nodes: tuple[str, ...]
    first_layer: int
    layers: int


class ParallelLayout(StrictModel):
    tensor_parallel_size: int
    pipeline_parallel_size: int
    chosen_by: Literal["stack", "auto", "stack+auto"]
    tp_interconnect: Literal["none", "nvlink", "fabric"]
    layer_partition: tuple[int, ...]
    vllm_pp_layer_partition: str | None  # VLLM_PP_LAYER_PARTITION; None with one stage
    stages: tuple[Stage, ...]
    head_node: str
    ray_head_address: str

    def stage_of(self, node: str) -> Stage:
        return next(stage for stage in self.stages if node in stage.nodes)


def plan_layout(spec: ClusterSpec) -> ParallelLayout:
    gpus = total_gpus(spec)
    tp, pp = _resolve_sizes(spec, gpus)
    _check_sizes(spec, tp, pp, gpus)
    partition = balanced_partition(spec.model.layers, pp)
    stages = _stages(spec, tp, partition)
    head = spec.nodes[0]
    chosen = {
        spec.serving.tensor_parallel_size == "auto",
        spec.serving.pipeline_parallel_size == "auto",
    }
    return ParallelLayout(
        tensor_parallel_size=tp,
        pipeline_parallel_size=pp,
        chosen_by="auto" if chosen == {True} else "stack" if chosen == {False} else "stack+auto",
        tp_interconnect=_interconnect(tp, stages),
        layer_partition=partition,
        vllm_pp_layer_partition=",".join(map(str, partition)) if pp > 1 else None,
        stages=stages,
        head_node=head.name,
        ray_head_address=f"{head.address}:{RAY_PORT}",
    )


def total_gpus(spec: ClusterSpec) -> int:
    return sum(spec.hardware(node).gpus for node in spec.nodes)


def balanced_partition(layers: int, stages: int) -> tuple[int, ...]:
    """Layers per stage, summing to `layers`, differing by at most one. The lighter stages sit at
    the ends: the first also runs the embedding and the API server, the last the LM head."""
    base, extra = divmod(layers, stages)
    pairs = zip(range(stages), reversed(range(stages)), strict=True)
    ends_first = list(dict.fromkeys(i for pair in pairs for i in pair))
    light = set(ends_first[: stages - extra])
    return tuple(base if i in light else base + 1 for i in range(stages))


def tp_groups(spec: ClusterSpec) -> list[list[str]]:
    """Nodes whose GPUs talk best to each other: one switch port, or one cabled component."""
    fabric = spec.fabric
    if fabric is None:
        return [[node.name] for node in spec.nodes]
    if fabric.switch:
        return [list(dict.fromkeys(e.node for e in port.nodes)) for port in fabric.switch.ports]
    group_of = {node.name: {node.name} for node in spec.nodes}
    for cable in fabric.cables:
        joined = group_of[cable.a.node] | group_of[cable.b.node]
        for name in joined:
            group_of[name] = joined
    groups = {frozenset(group) for group in group_of.values()}
    order = [node.name for node in spec.nodes]
    return sorted((sorted(g, key=order.index) for g in groups), key=lambda g: order.index(g[0]))


def valid_tp(model: ModelSpec, tp: int) -> bool:
    """vLLM shards attention heads evenly; KV heads are split, or replicated when fewer than tp."""
    kv_heads = model.attention.kv_heads
    kv_ok = kv_heads is None or kv_heads % tp == 0 or tp % kv_heads == 0
    return model.attention.heads % tp == 0 and kv_ok


def _auto_tp(spec: ClusterSpec, gpus: int) -> int:
    per_node = min(spec.hardware(node).gpus for node in spec.nodes)
    if per_node > 1:
        group = per_node
    else:
        sizes = {len(group) for group in tp_groups(spec)}
        group = sizes.pop() if len(sizes) == 1 else 1
    return max(
        t
        for t in range(1, group + 1)
        if group % t == 0 and gpus % t == 0 and valid_tp(spec.model, t)
    )


def _resolve_sizes(spec: ClusterSpec, gpus: int) -> tuple[int, int]:
    tp, pp = spec.serving.tensor_parallel_size, spec.serving.pipeline_parallel_size
    if tp == "auto" and pp == "auto":
        tp = _auto_tp(spec, gpus)
    if tp == "auto":
        assert pp != "auto"
        return max(gpus // pp, 1), pp
    return tp, (max(gpus // tp, 1) if pp == "auto" else pp)


def _check_sizes(spec: ClusterSpec, tp: int, pp: int, gpus: int) -> None:
    model = spec.model
    if pp > model.layers:
        _refuse(
            spec,
            "serving.pipeline_parallel_size",
            f"{pp} pipeline stages for the {model.layers} layers of {model.name}: every stage"
            f" needs at least one layer, so at most {model.layers}",
        )
    if not valid_tp(model, tp):
        valid = [t for t in range(1, gpus + 1) if gpus % t == 0 and valid_tp(model, t)]
        kv = f" and {model.attention.kv_heads} KV heads" if model.attention.kv_heads else ""
        _refuse(
            spec,
            "serving.tensor_parallel_size",
            f"{tp} does not divide the {model.attention.heads} attention heads{kv} of"
            f" {model.name}; sizes that do on {gpus} GPUs: {', '.join(map(str, valid))}",
        )
    if tp * pp != gpus:
        _refuse(
            spec,
            "serving.tensor_parallel_size",
            f"tensor_parallel_size x pipeline_parallel_size = {tp} x {pp} = {tp * pp}, but the"
            f" cluster has {gpus} GPUs ({hardware_summary(spec)}): vLLM with Ray runs one rank"
            " per GPU",
        )


def hardware_summary(spec: ClusterSpec) -> str:
    """'2 x gx10' or '1 x gb10 + 1 x gx10'."""
    counts: dict[str, int] = {}
    for node in spec.nodes:
        counts[node.hardware] = counts.get(node.hardware, 0) + 1
    return " + ".join(f"{count} x {name}" for name, count in counts.items())


def _refuse(spec: ClusterSpec, path: str, message: str) -> None:
    raise SpecError(spec.stack, [Problem(path, message)])


def _stages(spec: ClusterSpec, tp: int, partition: tuple[int, ...]) -> tuple[Stage, ...]:
    ranks = [node.name for node in spec.nodes for _ in range(spec.hardware(node).gpus)]
    stages, first = [], 0
    for index, layers in enumerate(partition):
        nodes = tuple(dict.fromkeys(ranks[index * tp : (index + 1) * tp]))
        stages.append(Stage(index=index, nodes=nodes, first_layer=first, layers=layers))
        first += layers
    return tuple(stages)


def _interconnect(tp: int, stages: tuple[Stage, ...]) -> Literal["none", "nvlink", "fabric"]:
    if tp == 1:
        return "none"
    return "nvlink" if all(len(stage.nodes) == 1 for stage in stages) else "fabric"

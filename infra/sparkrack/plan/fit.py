"""Does the model fit? Weights, the runtime budget, the KV cache, and what memory is left.

Two rules, both must hold:

- the whole-model minimum of seed 002: weights x 1.18 (runtime budget factor) within the GPU
  memory of the whole cluster;
- vLLM's cap, per GPU: at `gpu_memory_utilization` of its visible memory, each GPU holds its
  share of the weights, a runtime reserve, and the KV cache of one sequence of `max_model_len`
  tokens (vLLM refuses to start otherwise). The heaviest pipeline stage decides.

KV cache per token: GQA stores K and V per KV head per layer; MLA stores one compressed latent
(kv_lora_rank + rope_head_dim) per layer, whole on every TP rank; linear-attention layers keep a
constant state per sequence instead. Layer kinds are assumed spread evenly over the stages.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from sparkrack.plan.parallel import (
    ParallelLayout,
    balanced_partition,
    hardware_summary,
    total_gpus,
)
from sparkrack.stackspec import KV_CACHE_DTYPE_BYTES, ClusterSpec, LayerKind, ModelSpec, StrictModel
from sparkrack.stackspec.errors import Problem
from sparkrack.text.byte_units import decimal_bytes

CONTEXT_STEP = 1024  # suggested context lengths are rounded down to this

_PerLayer = Callable[[ClusterSpec, LayerKind, int], float]


class GpuFit(StrictModel):
    """One GPU's budget under vLLM's cap."""

    node: str
    stage: int
    layers: int
    weight_bytes: int
    runtime_reserve_bytes: int
    kv_bytes_per_token: int
    state_bytes_per_sequence: int
    kv_bytes_per_sequence: int  # one sequence of max_model_len tokens, state included
    required_bytes: int
    available_bytes: int
    headroom_bytes: int


class FitReport(StrictModel):
    fits: bool
    verdict: str
    model: str
    weight_bytes: int  # the checkpoint, and a speculative stack's draft head
    draft_weight_bytes: int  # of which the draft head (0: not speculative)
    estimated_weight_bytes: int | None  # total_params x bytes_per_param, when both are known
    runtime_budget_factor: float
    runtime_budget_bytes: int  # weights x factor: seed 002's whole-model minimum
    total_memory_bytes: int  # visible to the GPUs, whole cluster
    after_weights_bytes: int  # total memory - weights: what is left for KV cache and runtime
    gpu_memory_utilization: float
    available_bytes: int  # utilisation x total memory: vLLM's cap
    max_model_len: int
    kv_cache_bytes_per_element: float
    kv_bytes_per_token: int  # whole cluster, MLA replication across TP included
    state_bytes_per_sequence: int  # linear-attention state, whole cluster
    kv_bytes_per_sequence: int  # one sequence of max_model_len tokens, whole cluster
    runtime_reserve_bytes: int  # whole cluster
    required_bytes: int  # weights + runtime reserve + one sequence of max_model_len
    headroom_bytes: int  # available - required (negative: short)
    tightest_gpu: GpuFit
    max_sequences_at_max_model_len: int
    max_context_single_sequence: int
    concurrency_target: int | None
    concurrency_target_fits: bool | None
    would_fit: tuple[str, ...]  # what would, when it does not

    def problem(self) -> Problem:
        tight = self.tightest_gpu
        node = tight.node if self.runtime_budget_bytes <= self.total_memory_bytes else None
        return Problem("model", self.verdict, node)


@dataclass(frozen=True)
class _Case:
    """What the per-GPU arithmetic depends on; suggestions vary one field at a time."""

    weights: int
    tp: int
    partition: tuple[int, ...]
    max_model_len: int
    gpu_memory: int
    gpus: int


def model_weight_bytes(model: ModelSpec) -> int:
    if model.weight_bytes is not None:
        return int(model.weight_bytes)
    estimated = _estimated_weights(model)
    assert estimated is not None, "ModelSpec requires weight_bytes or bytes_per_param"
    return estimated


def speculative(spec: ClusterSpec) -> bool:
    """The stack's engine drafts tokens (`--speculative-config` among its extra args)."""
    return any(arg.startswith("--speculative-config") for arg in spec.serving.extra_args)


def draft_weight_bytes(spec: ClusterSpec) -> int:
    """A draft head (MTP, EAGLE) is one transformer layer of the model, loaded beside it."""
    if not speculative(spec):
        return 0
    return round(model_weight_bytes(spec.model) / spec.model.layers)


def kv_element_bytes(spec: ClusterSpec) -> float:
    return KV_CACHE_DTYPE_BYTES[spec.serving.kv_cache_dtype] or spec.model.kv_cache_bytes


def max_model_len(spec: ClusterSpec) -> int:
    return spec.serving.max_model_len or spec.model.max_position_embeddings


def plan_fit(spec: ClusterSpec, layout: ParallelLayout) -> FitReport:
    draft = draft_weight_bytes(spec)
    weights = model_weight_bytes(spec.model) + draft
    tp = layout.tensor_parallel_size
    length = max_model_len(spec)
    per_gpu = [
        _gpu_fit(spec, node, stage.index, stage.layers, tp, weights)
        for stage in layout.stages
        for node in stage.nodes
    ]
    gpus = total_gpus(spec)
    tight = min(per_gpu, key=lambda g: g.headroom_bytes)
    total_memory = sum(
        _gpu_memory(spec, node.name) * spec.hardware(node).gpus for node in spec.nodes
    )
    factor = spec.serving.runtime_budget_factor
    budget = round(weights * factor)
    kv_token = _cluster_kv(spec, tp, _kv_per_layer)
    state = _cluster_kv(spec, tp, _state_per_layer)
    reserve = int(spec.serving.runtime_reserve_per_gpu) * gpus
    available = round(spec.serving.gpu_memory_utilization * total_memory)
    required = weights + reserve + kv_token * length + state
    sequences = min(_sequences(g) for g in per_gpu)
    fits = budget <= total_memory and tight.headroom_bytes >= 0
    smallest = min(_gpu_memory(spec, node.name) for node in spec.nodes)
    case = _Case(weights, tp, layout.layer_partition, length, smallest, gpus)
    would_fit = () if fits else tuple(_would_fit(spec, case))
    target = spec.serving.max_num_seqs
    return FitReport(
        fits=fits,
        verdict=_verdict(spec, fits, budget, total_memory, tight, sequences, would_fit),
        model=spec.model.name,
        weight_bytes=weights,
        draft_weight_bytes=draft,
        estimated_weight_bytes=_estimated_weights(spec.model),
        runtime_budget_factor=factor,
        runtime_budget_bytes=budget,
        total_memory_bytes=total_memory,
        after_weights_bytes=total_memory - weights,
        gpu_memory_utilization=spec.serving.gpu_memory_utilization,
        available_bytes=available,
        max_model_len=length,
        kv_cache_bytes_per_element=kv_element_bytes(spec),
        kv_bytes_per_token=kv_token,
        state_bytes_per_sequence=state,
        kv_bytes_per_sequence=kv_token * length + state,
        runtime_reserve_bytes=reserve,
        required_bytes=required,
        headroom_bytes=available - required,
        tightest_gpu=tight,
        max_sequences_at_max_model_len=sequences,
        max_context_single_sequence=min(_context(spec, g) for g in per_gpu),
        concurrency_target=target,
        concurrency_target_fits=None if target is None else target <= sequences,
        would_fit=would_fit,
    )


# --- per layer, per GPU -----------------------------------------------------------------------


def _kv_per_layer(spec: ClusterSpec, kind: LayerKind, tp: int) -> float:
    attention = spec.model.attention
    element = kv_element_bytes(spec)
    if kind == "gqa":
        assert attention.kv_heads is not None
        return 2 * math.ceil(attention.kv_heads / tp) * attention.head_dim * element
    if kind == "mla":
        assert attention.kv_lora_rank is not None and attention.rope_head_dim is not None
        return (attention.kv_lora_rank + attention.rope_head_dim) * element
    return 0.0


def _state_per_layer(spec: ClusterSpec, kind: LayerKind, tp: int) -> float:
    attention = spec.model.attention
    if kind != "linear":
        return 0.0
    heads = attention.linear_heads or attention.heads
    width = attention.linear_head_dim or attention.head_dim
    return math.ceil(heads / tp) * width * width * attention.linear_state_bytes


def _stage_sum(spec: ClusterSpec, tp: int, stage_layers: int, per_layer: _PerLayer) -> float:
    """Per GPU of a stage with `stage_layers` layers, each kind in proportion."""
    share = stage_layers / spec.model.layers
    kinds = spec.model.attention.kinds(spec.model.layers)
    return sum(count * share * per_layer(spec, kind, tp) for kind, count in kinds.items())


def _cluster_kv(spec: ClusterSpec, tp: int, per_layer: _PerLayer) -> int:
    return round(tp * _stage_sum(spec, tp, spec.model.layers, per_layer))


def _gpu_memory(spec: ClusterSpec, node: str) -> int:
    spec_node = spec.node(node)
    return int(spec_node.overrides.gpu_memory or spec.hardware(spec_node).gpu_memory)


def _gpu_need(spec: ClusterSpec, case: _Case, stage_layers: int) -> tuple[float, float, float]:
    """Weights, KV bytes per token, and state bytes per sequence on one GPU of a stage."""
    weights = case.weights * stage_layers / spec.model.layers / case.tp
    kv = _stage_sum(spec, case.tp, stage_layers, _kv_per_layer)
    state = _stage_sum(spec, case.tp, stage_layers, _state_per_layer)
    return weights, kv, state


def _gpu_fit(
    spec: ClusterSpec, node: str, stage: int, layers: int, tp: int, weights: int
) -> GpuFit:
    case = _Case(weights, tp, (layers,), max_model_len(spec), _gpu_memory(spec, node), 1)
    weight, kv, state = _gpu_need(spec, case, layers)
    reserve = int(spec.serving.runtime_reserve_per_gpu)
    per_sequence = kv * case.max_model_len + state
    required = round(weight + reserve + per_sequence)
    available = round(spec.serving.gpu_memory_utilization * case.gpu_memory)
    return GpuFit(
        node=node,
        stage=stage,
        layers=layers,
        weight_bytes=round(weight),
        runtime_reserve_bytes=reserve,
        kv_bytes_per_token=round(kv),
        state_bytes_per_sequence=round(state),
        kv_bytes_per_sequence=round(per_sequence),
        required_bytes=required,
        available_bytes=available,
        headroom_bytes=available - required,
    )


def _sequences(gpu: GpuFit) -> int:
    room = gpu.available_bytes - gpu.weight_bytes - gpu.runtime_reserve_bytes
    return max(room // max(gpu.kv_bytes_per_sequence, 1), 0)


def _context(spec: ClusterSpec, gpu: GpuFit) -> int:
    room = (
        gpu.available_bytes
        - gpu.weight_bytes
        - gpu.runtime_reserve_bytes
        - gpu.state_bytes_per_sequence
    )
    limit = spec.model.max_position_embeddings
    if gpu.kv_bytes_per_token == 0:
        return limit if room >= 0 else 0
    return max(min(room // gpu.kv_bytes_per_token, limit), 0)


def _estimated_weights(model: ModelSpec) -> int | None:
    return (
        None if model.bytes_per_param is None else round(model.total_params * model.bytes_per_param)
    )


# --- verdict and what would fit ---------------------------------------------------------------


def _case_fits(spec: ClusterSpec, case: _Case) -> bool:
    if case.weights * spec.serving.runtime_budget_factor > case.gpu_memory * case.gpus:
        return False
    weight, kv, state = _gpu_need(spec, case, max(case.partition))
    need = weight + int(spec.serving.runtime_reserve_per_gpu) + kv * case.max_model_len + state
    return need <= spec.serving.gpu_memory_utilization * case.gpu_memory


def _would_fit(spec: ClusterSpec, case: _Case) -> list[str]:
    return [_more_nodes(spec, case), _lighter_weights(spec, case), _shorter_context(spec, case)]


def _more_nodes(spec: ClusterSpec, case: _Case) -> str:
    per_node = spec.hardware(spec.nodes[0]).gpus
    have = len(spec.nodes)
    for nodes in range(have + 1, have * 8 + 64):
        gpus = nodes * per_node
        if gpus % case.tp:
            continue
        stages = gpus // case.tp
        if stages > spec.model.layers:
            break
        bigger = replace(case, gpus=gpus, partition=balanced_partition(spec.model.layers, stages))
        if _case_fits(spec, bigger):
            return f"{nodes} nodes of {spec.nodes[0].hardware} (tp {case.tp} x pp {stages})"
    return f"not more {spec.nodes[0].hardware} nodes at tp {case.tp}"


def _lighter_weights(spec: ClusterSpec, case: _Case) -> str:
    heaviest = max(case.partition)
    _, kv, state = _gpu_need(spec, case, heaviest)
    room = spec.serving.gpu_memory_utilization * case.gpu_memory - int(
        spec.serving.runtime_reserve_per_gpu
    )
    per_gpu_limit = (
        (room - kv * case.max_model_len - state) * case.tp * spec.model.layers / heaviest
    )
    limit = min(case.gpu_memory * case.gpus / spec.serving.runtime_budget_factor, per_gpu_limit)
    if limit <= 0:
        return "not a smaller quantization: the KV cache alone fills the memory"
    bits = limit * 8 / spec.model.total_params
    now = case.weights * 8 / spec.model.total_params
    return (
        f"weights of at most {decimal_bytes(limit)} (~{bits:.1f} bits per"
        f" parameter; {spec.model.quantization} is {decimal_bytes(case.weights)}, ~{now:.1f})"
    )


def _shorter_context(spec: ClusterSpec, case: _Case) -> str:
    if case.weights * spec.serving.runtime_budget_factor > case.gpu_memory * case.gpus:
        factor = spec.serving.runtime_budget_factor
        return f"not a shorter context: the weights x {factor} alone exceed the memory"
    length = case.max_model_len
    while length >= CONTEXT_STEP and not _case_fits(spec, replace(case, max_model_len=length)):
        length = (length - 1) // CONTEXT_STEP * CONTEXT_STEP
    if length < CONTEXT_STEP:
        return "not a shorter context: the weights and runtime reserve alone do not fit"
    return f"max_model_len {length} or less (now {case.max_model_len})"


def _verdict(
    spec: ClusterSpec,
    fits: bool,
    budget: int,
    total_memory: int,
    tight: GpuFit,
    sequences: int,
    would_fit: tuple[str, ...],
) -> str:
    model, hardware = spec.model.name, hardware_summary(spec)
    if fits:
        return (
            f"{model} fits {hardware}: the tightest GPU ({tight.node}) keeps"
            f" {decimal_bytes(tight.headroom_bytes)} spare at gpu_memory_utilization"
            f" {spec.serving.gpu_memory_utilization}, room for {sequences}"
            f" sequence{'' if sequences == 1 else 's'} of"
            f" {max_model_len(spec)} tokens"
        )
    if budget > total_memory:
        weights = decimal_bytes(model_weight_bytes(spec.model))
        shortfall = (
            f"{model} does not fit {hardware}: it needs {decimal_bytes(budget)} ({weights} of"
            f" weights x {spec.serving.runtime_budget_factor} runtime budget) and they have"
            f" {decimal_bytes(total_memory)}, {decimal_bytes(budget - total_memory)} short"
        )
    else:
        on_gpu, reserve = tight.weight_bytes, tight.runtime_reserve_bytes
        shortfall = (
            f"{model} does not fit {tight.node} (stage {tight.stage}, {tight.layers} of"
            f" {spec.model.layers} layers): at gpu_memory_utilization"
            f" {spec.serving.gpu_memory_utilization} a GPU may use"
            f" {decimal_bytes(tight.available_bytes)} but needs"
            f" {decimal_bytes(tight.required_bytes)} ({decimal_bytes(on_gpu)} weights +"
            f" {decimal_bytes(reserve)} runtime reserve +"
            f" {decimal_bytes(tight.kv_bytes_per_sequence)} KV cache for one"
            f" {max_model_len(spec)}-token sequence), {decimal_bytes(-tight.headroom_bytes)} short"
        )
    return f"{shortfall}. What would fit: {'; '.join(would_fit)}"

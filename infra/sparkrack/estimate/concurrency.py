"""Decode at N concurrent streams: per request, all together, whether their KV cache fits, and
where adding streams stops paying, from either limit.

The decode model (estimate/decode.py) gives one step's time at a batch of N streams: a dense model's
weights are read once for all of them, a mixture of experts' the union of the experts they route
to, and each stream reads its own KV cache; the step's matrix products grow with N. Per-request
speed falls as N grows; the aggregate rises until one of these binds:
  - memory bandwidth: the KV reads (or, for an MoE, every expert) dominate the step;
  - compute: the products outgrow the reads (the hardware profile's dense tensor TFLOPS x
    decode_model.yaml's compute_efficiency), and the aggregate flattens at the compute ceiling;
  - the KV cache: the tightest GPU holds no more streams at this context.
"""

from __future__ import annotations

import math
from typing import Literal, Protocol

from pydantic import Field

from sparkrack.estimate.decode import DecodeConstants, DecodeInputs, decode_terms
from sparkrack.stackspec import StrictModel

# Adding streams "stops paying" once doubling them raises the aggregate by less than this: the
# next agents each get a slower answer for almost no more tokens from the machine.
KNEE_GAIN = 0.10
MAX_STREAMS = 1024  # the sweep's end when the KV cache would hold more
# Streams that route alike (one prompt sampled N times, agents on one task) draw next to no fresh
# experts: expert_overlap near 0, the bound of what sharing can give.
SHARED_OVERLAP = 1e-6

Limit = Literal["memory bandwidth", "compute", "kv cache", "sweep"]


class GpuBudget(Protocol):
    """One GPU's memory as the fit counts it (the Plan's `GpuFit` is one): what the KV cache of
    the streams has left once the weights and the runtime's reserve are in."""

    @property
    def available_bytes(self) -> int: ...
    @property
    def weight_bytes(self) -> int: ...
    @property
    def runtime_reserve_bytes(self) -> int: ...
    @property
    def kv_bytes_per_token(self) -> int: ...
    @property
    def state_bytes_per_sequence(self) -> int: ...


class StreamLevel(StrictModel):
    streams: int
    per_request_tok_s: float
    aggregate_tok_s: float
    bound: Literal["memory", "compute"]  # what a step waits for, the fixed terms apart


class ConcurrencyEstimate(StrictModel):
    streams: int = Field(ge=1, description="asked for")
    context_tokens: int  # each stream's cache depth
    per_request_tok_s: float
    aggregate_tok_s: float
    # Mixture of experts: the aggregate if the streams routed alike (an upper bound; benchmark
    # streams on different prompts draw expert_overlap of a fresh routing each). Dense: the same.
    shared_routing_aggregate_tok_s: float
    kv_bytes_per_stream: int  # on the tightest GPU, linear-attention state included
    kv_streams_fit: int  # streams whose cache the tightest GPU holds at this context
    fits: bool
    # The compute ceiling: the aggregate once every step is compute-bound (all GPUs of one
    # replica at the profile's dense TFLOPS x compute_efficiency), and the fewest streams at which
    # a step is; None when the profile names no TFLOPS, or (streams) when no sweep level gets there.
    compute_ceiling_tok_s: float | None
    compute_bound_streams: int | None
    knee_streams: int  # past it, doubling the streams adds less than KNEE_GAIN, or none fit
    knee_aggregate_tok_s: float
    knee_limit: Limit  # which limit binds there
    knee_reason: str
    levels: tuple[StreamLevel, ...]  # 1, 2, 4, ... and the streams asked for


def plan_concurrency(
    inputs: DecodeInputs, k: DecodeConstants, gpu: GpuBudget, streams: int
) -> ConcurrencyEstimate:
    context = inputs.context_tokens
    per_stream = gpu.kv_bytes_per_token * context + gpu.state_bytes_per_sequence
    room = gpu.available_bytes - gpu.weight_bytes - gpu.runtime_reserve_bytes
    fit_streams = max(room // max(per_stream, 1), 0)
    asked = level(inputs, k, streams)
    knee, limit, reason = knee_streams(inputs, k, min(fit_streams, MAX_STREAMS))
    sweep = sorted({*doublings(max(streams, knee)), streams, knee})
    shared = k.with_values({"expert_overlap": SHARED_OVERLAP})
    return ConcurrencyEstimate(
        streams=streams,
        context_tokens=context,
        per_request_tok_s=asked.per_request_tok_s,
        aggregate_tok_s=asked.aggregate_tok_s,
        shared_routing_aggregate_tok_s=level(inputs, shared, streams).aggregate_tok_s,
        kv_bytes_per_stream=per_stream,
        kv_streams_fit=fit_streams,
        fits=streams <= fit_streams,
        compute_ceiling_tok_s=compute_ceiling(inputs, k),
        compute_bound_streams=compute_bound_streams(inputs, k),
        knee_streams=knee,
        knee_aggregate_tok_s=level(inputs, k, knee).aggregate_tok_s,
        knee_limit=limit,
        knee_reason=reason,
        levels=tuple(level(inputs, k, n) for n in sweep),
    )


def level(inputs: DecodeInputs, k: DecodeConstants, streams: int) -> StreamLevel:
    """Pipeline stages work on different streams at once (vLLM keeps one micro-batch in flight
    per stage): the streams split into up to `pp` micro-batches, each a batch of its own."""
    microbatches = min(streams, inputs.pp)
    batch = math.ceil(streams / microbatches)
    terms = decode_terms(inputs.model_copy(update={"batch": batch}), k)
    return StreamLevel(
        streams=streams,
        per_request_tok_s=terms.tok_s,
        aggregate_tok_s=terms.tok_s * streams,
        bound="compute" if terms.compute_bound else "memory",
    )


def compute_ceiling(inputs: DecodeInputs, k: DecodeConstants) -> float | None:
    """Tokens a second when every step is compute-bound: tp x pp GPUs at the dense TFLOPS x the
    compute share, each token flops_per_token (the fixed per-step terms only lower it)."""
    if inputs.tensor_tflops is None or inputs.flops_per_token <= 0:
        return None
    gpus = inputs.tp * inputs.pp
    rate = inputs.tensor_tflops * 1e12 * k.get("compute_efficiency")
    return gpus * rate / inputs.flops_per_token


def compute_bound_streams(inputs: DecodeInputs, k: DecodeConstants) -> int | None:
    """The fewest streams (up to MAX_STREAMS) whose step is compute-bound, or None."""
    if compute_ceiling(inputs, k) is None or level(inputs, k, MAX_STREAMS).bound != "compute":
        return None
    low, high = 1, MAX_STREAMS  # reads per stream only fall with more streams: monotone
    while low < high:
        middle = (low + high) // 2
        if level(inputs, k, middle).bound == "compute":
            high = middle
        else:
            low = middle + 1
    return low


def knee_streams(inputs: DecodeInputs, k: DecodeConstants, limit: int) -> tuple[int, Limit, str]:
    """Where more streams stop paying, the limit that binds there and why, in words: the first
    of a doubling that adds less than KNEE_GAIN (memory bandwidth), the streams from which a step
    is compute-bound (past them the aggregate is flat), and the KV cache's limit."""
    if limit < 1:
        return 1, "kv cache", "the KV cache holds no stream at this context"
    compute_from = compute_bound_streams(inputs, k)
    if compute_from is not None and compute_from <= limit:
        limit = compute_from  # nothing past it pays: the sweep ends there
    streams = 1
    while streams * 2 <= limit:
        doubled = level(inputs, k, streams * 2)
        gain = doubled.aggregate_tok_s / level(inputs, k, streams).aggregate_tok_s
        if gain < 1 + KNEE_GAIN and doubled.bound == "memory":
            added = f"doubling to {streams * 2} adds {gain - 1:.0%}"
            why = "each stream's reads (its KV cache, the experts it adds) lengthen the step"
            return streams, "memory bandwidth", f"{added}: {why}"
        streams *= 2
    if compute_from is not None and compute_from == limit:
        ceiling = compute_ceiling(inputs, k) or 0.0
        why = (
            f"from {compute_from} streams each step is compute-bound: more streams lengthen it"
            f" as much as they add tokens (the compute ceiling, collectives apart:"
            f" {ceiling:.0f} tok/s together)"
        )
        return compute_from, "compute", why
    if limit >= MAX_STREAMS:
        return streams, "sweep", f"still gaining at {streams}: the sweep stops there"
    why = f"the KV cache holds {limit} streams at this context{_compute_after(compute_from)}"
    return streams, "kv cache", why


def _compute_after(compute_from: int | None) -> str:
    if compute_from is None:
        return "; no step up to the sweep's end is compute-bound"
    return f"; compute would bind from {compute_from} streams, more than fit"


def doublings(top: int) -> list[int]:
    levels, n = [], 1
    while n <= top:
        levels.append(n)
        n *= 2
    return levels

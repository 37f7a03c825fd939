"""Decode at N concurrent streams: per request, all together, whether their KV cache fits, and
where adding streams stops paying.

The decode model (plan/decode.py) gives one step's time at a batch of N streams: a dense model's
weights are read once for all of them, a mixture of experts' the union of the experts they route
to, and each stream reads its own KV cache. Per-request speed falls as N grows; the aggregate
rises until the KV reads (or, for an MoE, every expert) dominate the step. Compute is not in the
model: at large N on a small GPU it binds first, so the aggregate past the knee is a ceiling.
"""

from __future__ import annotations

import math

from pydantic import Field

from sparkrack.plan.decode import DecodeConstants, DecodeInputs, decode_terms
from sparkrack.plan.fit import GpuFit
from sparkrack.spec import StrictModel

# Adding streams "stops paying" once doubling them raises the aggregate by less than this: the
# next agents each get a slower answer for almost no more tokens from the machine.
KNEE_GAIN = 0.10
MAX_STREAMS = 1024  # the sweep's end when the KV cache would hold more


class StreamLevel(StrictModel):
    streams: int
    per_request_tok_s: float
    aggregate_tok_s: float


class ConcurrencyEstimate(StrictModel):
    streams: int = Field(ge=1, description="asked for")
    context_tokens: int  # each stream's cache depth
    per_request_tok_s: float
    aggregate_tok_s: float
    kv_bytes_per_stream: int  # on the tightest GPU, linear-attention state included
    kv_streams_fit: int  # streams whose cache the tightest GPU holds at this context
    fits: bool
    knee_streams: int  # past it, doubling the streams adds less than KNEE_GAIN
    knee_aggregate_tok_s: float
    knee_reason: str
    levels: tuple[StreamLevel, ...]  # 1, 2, 4, ... and the streams asked for


def plan_concurrency(
    inputs: DecodeInputs, k: DecodeConstants, gpu: GpuFit, streams: int
) -> ConcurrencyEstimate:
    context = inputs.context_tokens
    per_stream = gpu.kv_bytes_per_token * context + gpu.state_bytes_per_sequence
    room = gpu.available_bytes - gpu.weight_bytes - gpu.runtime_reserve_bytes
    fit_streams = max(room // max(per_stream, 1), 0)
    asked = level(inputs, k, streams)
    knee, reason = knee_streams(inputs, k, min(fit_streams, MAX_STREAMS))
    sweep = sorted({*doublings(max(streams, knee)), streams})
    return ConcurrencyEstimate(
        streams=streams,
        context_tokens=context,
        per_request_tok_s=asked.per_request_tok_s,
        aggregate_tok_s=asked.aggregate_tok_s,
        kv_bytes_per_stream=per_stream,
        kv_streams_fit=fit_streams,
        fits=streams <= fit_streams,
        knee_streams=knee,
        knee_aggregate_tok_s=level(inputs, k, knee).aggregate_tok_s,
        knee_reason=reason,
        levels=tuple(level(inputs, k, n) for n in sweep),
    )


def level(inputs: DecodeInputs, k: DecodeConstants, streams: int) -> StreamLevel:
    """Pipeline stages work on different streams at once (vLLM keeps one micro-batch in flight
    per stage): the streams split into up to `pp` micro-batches, each a batch of its own."""
    microbatches = min(streams, inputs.pp)
    batch = math.ceil(streams / microbatches)
    per_request = decode_terms(inputs.model_copy(update={"batch": batch}), k).tok_s
    return StreamLevel(
        streams=streams,
        per_request_tok_s=per_request,
        aggregate_tok_s=per_request * streams,
    )


def knee_streams(inputs: DecodeInputs, k: DecodeConstants, limit: int) -> tuple[int, str]:
    """The streams past which doubling pays less than KNEE_GAIN, or the KV cache's limit."""
    if limit < 1:
        return 1, "the KV cache holds no stream at this context"
    streams = 1
    while streams * 2 <= limit:
        gain = (
            level(inputs, k, streams * 2).aggregate_tok_s
            / level(inputs, k, streams).aggregate_tok_s
        )
        if gain < 1 + KNEE_GAIN:
            return streams, f"doubling to {streams * 2} adds {gain - 1:.0%}"
        streams *= 2
    if limit >= MAX_STREAMS:
        return streams, f"still gaining at {streams}: the sweep stops there"
    return streams, f"the KV cache holds {limit} streams at this context"


def doublings(top: int) -> list[int]:
    levels, n = [], 1
    while n <= top:
        levels.append(n)
        n *= 2
    return levels

"""Decode speed of a stack: the decode model (estimate/decode.py) applied to its layout, for one
stream and for N concurrent ones (estimate/concurrency.py).

The spec and layout give the model's bytes, layers and KV cache, the hardware's bandwidth, class
and dense tensor TFLOPS (the compute ceiling), the parallel layout and the interconnect; the
engine and weight format come from the stack (or `sparkrack estimate --engine /
--weight-format`). Every constant is a fitted or sourced
value of `catalog/decode_model.yaml`; the range is the fit's leave-one-out error, widened when the
configuration is outside what the calibration rows cover.
"""

from __future__ import annotations

import re

from pydantic import Field

from sparkrack.estimate.calibration import shipped_constants
from sparkrack.estimate.concurrency import ConcurrencyEstimate, plan_concurrency
from sparkrack.estimate.decode import (
    ALLREDUCES_PER_LAYER,
    DecodeConstants,
    DecodeInputs,
    Interconnect,
    Precision,
    ceiling_tok_s,
    decode_terms,
    dominant,
    leaning_rows,
    outside_calibration,
    tok_s_range,
)
from sparkrack.plan.fit import FitReport, model_weight_bytes, speculative
from sparkrack.plan.parallel import ParallelLayout
from sparkrack.stackspec import ClusterSpec, HardwareProfile, ModelSpec, StrictModel
from sparkrack.text.byte_units import decimal_bytes

DEFAULT_CONTEXT_TOKENS = 1024  # cache depth while decoding: a short prompt, as most rows ran
DEFAULT_DRAFT_TOKENS = 3  # vLLM's and TensorRT-LLM's MTP examples propose 3 (H12: MTP=3)
HBM_CLASS_ABOVE_GB_S = 1000  # a profile with no decode_class: HBM-class above this bandwidth


class DecodeOptions(StrictModel):
    """What `sparkrack estimate` may set beside the stack: engine, format, context, constants."""

    engine: str | None = None  # default: the stack's engine
    speculative: bool | None = None  # default: the stack's extra_args name a speculative config
    context_tokens: int = Field(default=DEFAULT_CONTEXT_TOKENS, ge=0)
    concurrency: int | None = Field(default=None, ge=1)  # default: the stack's max_num_seqs, or 1
    constants: DecodeConstants | None = None  # default: the shipped fit


class PerfEstimate(StrictModel):
    inputs: DecodeInputs
    active_params: float
    active_weight_bytes: int  # read per token, whole model
    read_bytes_per_token_per_gpu: int  # per node on GB10
    memory_bandwidth_gb_s: float
    hardware_class: str
    engine: str
    weight_format: str
    decode_efficiency: float  # the share of bandwidth weight reads reach (fitted)
    memory_ms: float  # weights and KV cache at that efficiency
    kv_ms: float
    layer_ms: float
    allreduces_per_token: int
    allreduce_us: float
    allreduce_ms: float
    pp_hops_per_token: int
    pp_hop_us: float
    pp_ms: float
    compute_precision: Precision | None  # what the products run at on this card; None: unknown
    tensor_tflops: float | None  # dense, per GPU, at that precision (the hardware profile's)
    compute_ms: float  # the step's products at the compute ceiling (hidden under the reads at 1)
    speculative_gain: float
    decode_tok_s_ceiling: float
    decode_tok_s_expected: float
    decode_tok_s_low: float
    decode_tok_s_high: float
    dominant_terms: tuple[str, ...]
    outside_calibration: tuple[str, ...]
    fabric_share: float  # of the expected token time, spent in all-reduces and hops
    leans_on: tuple[str, ...]  # calibration rows behind the constants that move this estimate
    concurrency: ConcurrencyEstimate
    assumptions: tuple[str, ...]


def plan_performance(
    spec: ClusterSpec, layout: ParallelLayout, fit: FitReport, options: DecodeOptions | None = None
) -> PerfEstimate:
    options = options or DecodeOptions()
    k = options.constants or shipped_constants()
    inputs = decode_inputs(spec, layout, fit, options, k)
    terms = decode_terms(inputs, k)
    expected = terms.tok_s
    outside = outside_calibration(inputs, k)
    low, high = tok_s_range(expected, bool(outside), k)
    active = spec.model.active_params or spec.model.total_params
    hop_us = k.get("pp_hop_us")
    return PerfEstimate(
        inputs=inputs,
        active_params=active,
        active_weight_bytes=round(inputs.active_weight_bytes),
        read_bytes_per_token_per_gpu=round(inputs.active_weight_bytes / inputs.tp / inputs.pp),
        memory_bandwidth_gb_s=inputs.bandwidth_gb_s,
        hardware_class=inputs.hardware_class,
        engine=inputs.engine,
        weight_format=inputs.weight_format,
        decode_efficiency=round(terms.efficiency, 4),
        memory_ms=terms.weights_ms + terms.kv_ms,
        kv_ms=terms.kv_ms,
        layer_ms=terms.layers_ms,
        allreduces_per_token=ALLREDUCES_PER_LAYER * inputs.layers if inputs.tp > 1 else 0,
        allreduce_us=round(terms.allreduce_us, 2),
        allreduce_ms=terms.allreduce_ms,
        pp_hops_per_token=inputs.pp - 1,
        pp_hop_us=hop_us,
        pp_ms=terms.hops_ms,
        compute_precision=compute_rate(slowest_profile(spec), inputs.weight_format, k)[0],
        tensor_tflops=inputs.tensor_tflops,
        compute_ms=terms.compute_ms,
        speculative_gain=terms.speculative_gain,
        decode_tok_s_ceiling=ceiling_tok_s(inputs, terms, k),
        decode_tok_s_expected=expected,
        decode_tok_s_low=low,
        decode_tok_s_high=high,
        dominant_terms=dominant(terms),
        outside_calibration=outside,
        fabric_share=(terms.allreduce_ms + terms.hops_ms) / terms.total_ms,
        leans_on=leaning_rows(inputs, k),
        concurrency=plan_concurrency(inputs, k, fit.tightest_gpu, _streams(spec, options)),
        assumptions=_assumptions(spec, inputs, k),
    )


def _streams(spec: ClusterSpec, options: DecodeOptions) -> int:
    return options.concurrency or spec.serving.max_num_seqs or 1


def decode_inputs(
    spec: ClusterSpec,
    layout: ParallelLayout,
    fit: FitReport,
    options: DecodeOptions,
    k: DecodeConstants,
) -> DecodeInputs:
    model = spec.model
    profile = slowest_profile(spec)
    tp, pp = layout.tensor_parallel_size, layout.pipeline_parallel_size
    active = model.active_params or model.total_params
    fmt = weight_format(model)
    return DecodeInputs(
        hardware_class=hardware_class(profile),
        bandwidth_gb_s=profile.memory_bandwidth_gb_s,
        engine=options.engine or spec.serving.engine.name,
        weight_format=fmt,
        moe=model.active_params is not None and model.active_params < model.total_params,
        active_weight_bytes=active * model_weight_bytes(model) / model.total_params,
        total_weight_bytes=model_weight_bytes(model),
        experts=model.experts,
        experts_per_token=model.experts_per_token,
        layers=model.layers,
        hidden_size=model.hidden_size,
        # The fit report's figures are whole-cluster, MLA's replication over TP included: / tp
        # below gives what one GPU reads, summed over the pipeline stages.
        kv_bytes_per_token=fit.kv_bytes_per_token,
        state_bytes=fit.state_bytes_per_sequence,
        context_tokens=options.context_tokens,
        tp=tp,
        pp=pp,
        interconnect=_interconnect(layout, profile),
        tp_nodes=max(len(stage.nodes) for stage in layout.stages),
        link_gb_s=profile.nvlink_gb_s,
        speculative=speculative(spec) if options.speculative is None else options.speculative,
        draft_tokens=_draft_tokens(spec),
        flops_per_token=2 * active + attention_flops(model) * options.context_tokens,
        tensor_tflops=compute_rate(profile, fmt, k)[1],
    )


def compute_rate(
    profile: HardwareProfile, fmt: str, k: DecodeConstants
) -> tuple[Precision | None, float | None]:
    """The precision a step's products run at on this card, and its dense TFLOPS per GPU: the
    format's (decode_model.yaml), else 16 bits (FP4 weights on Hopper multiply in 16 bits)."""
    known = k.formats.get(fmt.lower())
    for precision in (known.compute if known else "bf16", "bf16"):
        if precision in profile.tensor_tflops:
            return precision, profile.tensor_tflops[precision]
    return None, None


def attention_flops(model: ModelSpec) -> float:
    """FLOPs of one token's attention per cached position, whole model: QK and PV, 4 x heads x
    head_dim in a GQA layer, 2 x heads x (2 x kv_lora_rank + rope_head_dim) in an MLA layer
    (latent absorbed); a linear-attention layer's work does not grow with the context."""
    attention = model.attention
    latent = 2 * (attention.kv_lora_rank or 0) + (attention.rope_head_dim or 0)
    per_layer = {
        "gqa": 4 * attention.heads * attention.head_dim,
        "mla": 2 * attention.heads * latent,
        "linear": 0,
    }
    return sum(count * per_layer[kind] for kind, count in attention.kinds(model.layers).items())


def slowest_profile(spec: ClusterSpec) -> HardwareProfile:
    """Decode waits for the slowest memory: plan with that node's profile."""
    return min((spec.hardware(node) for node in spec.nodes), key=lambda p: p.memory_bandwidth_gb_s)


def hardware_class(profile: HardwareProfile) -> str:
    if profile.decode_class is not None:
        return profile.decode_class
    return "hbm" if profile.memory_bandwidth_gb_s > HBM_CLASS_ABOVE_GB_S else "gb10"


def weight_format(model: ModelSpec) -> str:
    return (model.weight_format or model.quantization).lower()


def with_weight_format(spec: ClusterSpec, fmt: str, k: DecodeConstants) -> ClusterSpec:
    """The spec's model at another weight format: its bytes at that format's nominal size."""
    known = k.formats.get(fmt.lower())
    if known is None:
        raise ValueError(f"unknown weight format {fmt!r}; known: {', '.join(sorted(k.formats))}")
    model = spec.model.model_copy(
        update={
            "weight_format": fmt.lower(),
            "quantization": fmt.lower(),
            "weight_bytes": None,
            "bytes_per_param": known.bytes_per_param,
        }
    )
    return spec.model_copy(update={"model": model})


def _interconnect(layout: ParallelLayout, profile: HardwareProfile) -> Interconnect:
    if layout.tp_interconnect == "fabric":
        return profile.fabric_transport
    return layout.tp_interconnect


def _draft_tokens(spec: ClusterSpec) -> int:
    """num_speculative_tokens from the stack's --speculative-config, else the engines' usual 3."""
    found = re.search(r'"num_speculative_tokens"\s*:\s*(\d+)', " ".join(spec.serving.extra_args))
    return int(found.group(1)) if found and int(found.group(1)) > 0 else DEFAULT_DRAFT_TOKENS


def _compute_note(inputs: DecodeInputs, k: DecodeConstants) -> str:
    share = k.get("compute_efficiency")
    if inputs.tensor_tflops is None:
        return "no tensor TFLOPS in the hardware profile: no compute ceiling"
    return (
        f"compute ceiling: {inputs.flops_per_token / 1e9:.3g} GFLOP a token at"
        f" {inputs.tensor_tflops:g} dense TFLOPS per GPU x {share:g} (assumed share of the peak)"
    )


def _assumptions(spec: ClusterSpec, inputs: DecodeInputs, k: DecodeConstants) -> tuple[str, ...]:
    model = spec.model
    active = model.active_params or model.total_params
    notes = [
        f"decode reads the active weights once per token: {active / 1e9:.3g}B parameters,"
        f" {decimal_bytes(inputs.active_weight_bytes)}, split over tp {inputs.tp}",
        f"{inputs.engine}, {inputs.weight_format} weights"
        f" ({k.format_group(inputs.weight_format)}), hardware class {inputs.hardware_class},"
        f" {inputs.bandwidth_gb_s:g} GB/s per GPU",
        f"KV cache read at {inputs.context_tokens} tokens of context (full-attention layers)",
        "constants fitted to published runs: catalog/decode_model.yaml (tools/fit_decode.py)",
        _compute_note(inputs, k),
    ]
    if inputs.pp > 1:
        notes.append(f"{inputs.pp - 1} pipeline hops per token at {k.get('pp_hop_us'):g} us each")
    if inputs.speculative:
        notes.append(
            f"speculative decoding on: {inputs.draft_tokens} draft tokens a step, each accepted"
            f" at {k.get('speculative_acceptance'):.0%} (fitted, 1 row)"
        )
    if inputs.moe and inputs.experts is None:
        notes.append(
            "the model names no expert count: with several streams each reads its routed"
            " weights afresh (up to the whole checkpoint), an upper bound on the batch's reads"
        )
    return tuple(notes)

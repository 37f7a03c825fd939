"""The decode model: one step's time as a sum of terms, every constant from data.

A step emits one token for each of the `batch` streams decoding together (1: single stream).

    weights   bytes read / tp / (bandwidth x efficiency)        efficiency by hardware class,
              a dense model's weights once per step; a          engine, format (NVFP4 MoE apart)
              mixture of experts' shared part once and the
              union of the experts the batch routes to
    kv cache  batch x full-attention KV x context (+ linear state) / bandwidth, same efficiency
    layers    layers x fixed time per layer                     by hardware class, dense or MoE
    all-reduce 2 per layer when tp > 1: latency x ring steps + batch x message / link bandwidth
    hops      (pp - 1) x hop time
    compute   batch x FLOPs a token / tp / (dense tensor TFLOPS x compute_efficiency)
    speculative decoding (when on): a step verifies draft_tokens + 1 positions per stream after
    draft_tokens steps of a one-layer draft head, and emits (1 - a^(d+1)) / (1 - a) tokens
    per-request tok/s = tokens emitted / step, aggregate = batch x that

A step takes max(weights + KV + layers, compute) + all-reduces + hops: the reads and the products
overlap (a roofline), and once the products dominate, the latency-bound small kernels of each layer
hide under them; the aggregate then flattens at the compute ceiling. Collectives and hops wait.

The constants live in `catalog/decode_model.yaml`, each with its source or the rows it was
fitted on (`tools/fit_decode.py`). This module only evaluates them: it reads nothing itself.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Literal

from pydantic import Field

from sparkrack.stackspec import StrictModel

Interconnect = Literal["none", "nvlink", "roce", "infiniband"]
Precision = Literal["fp4", "fp8", "bf16"]
ALLREDUCES_PER_LAYER = 2  # after attention and after the MLP / experts
ACTIVATION_BYTES = 2  # bf16 hidden state: the all-reduce message per token is hidden x 2 bytes


class DecodeInputs(StrictModel):
    """What the decode model needs to know of one configuration, from a spec or a published run."""

    hardware_class: str
    bandwidth_gb_s: float = Field(gt=0)
    engine: str
    weight_format: str
    moe: bool
    active_weight_bytes: float = Field(gt=0, description="read per token, whole model")
    total_weight_bytes: float = Field(default=0, ge=0, description="whole checkpoint; 0: unknown")
    experts: int | None = Field(default=None, gt=0)  # routed experts per layer (MoE)
    experts_per_token: int | None = Field(default=None, gt=0)
    batch: int = Field(default=1, ge=1, description="streams decoding together")
    layers: int = Field(gt=0)
    hidden_size: int = Field(gt=0)
    kv_bytes_per_token: float = Field(ge=0, description="full-attention layers, whole model")
    kv_split_by_tp: bool = True  # GQA heads split over TP ranks; an MLA latent is replicated
    state_bytes: float = Field(default=0, ge=0, description="linear-attention state, read/token")
    context_tokens: int = Field(ge=0)
    tp: int = Field(ge=1)
    pp: int = Field(ge=1)
    interconnect: Interconnect
    tp_nodes: int = Field(ge=1, description="nodes one TP group spans: ring steps across them")
    link_gb_s: float | None = Field(default=None, gt=0, description="the profile's, one way")
    speculative: bool = False
    draft_tokens: int = Field(default=3, ge=1, description="proposed per step when speculative")
    # The compute ceiling: FLOPs of one token through the whole model (2 x active parameters plus
    # attention over the context), and the dense tensor TFLOPS of one GPU at the precision the
    # products run at. No TFLOPS (a calibration row, an unknown card): no compute term.
    flops_per_token: float = Field(default=0, ge=0)
    tensor_tflops: float | None = Field(default=None, gt=0)


class Constant(StrictModel):
    value: float = Field(gt=0)
    fit: bool = False
    prior: float | None = Field(default=None, gt=0)
    source: str
    rows: tuple[str, ...] = ()  # the calibration rows that move it (written by the fit)


class FormatInfo(StrictModel):
    group: str
    bytes_per_param: float = Field(gt=0)
    # The precision its matrix products run at where the card has it: W4A16 paths (AWQ, GPTQ,
    # Marlin) multiply in 16 bits; NVFP4 / MXFP4 in FP4 on Blackwell, in 16 bits elsewhere.
    compute: Precision = "bf16"


class DecodeConstants(StrictModel):
    constants: dict[str, Constant]
    formats: dict[str, FormatInfo]
    engines: tuple[str, ...]
    coverage: dict[str, tuple[str, ...]] = Field(default_factory=dict)
    error: dict[str, float] = Field(default_factory=dict)
    rows: dict[str, dict[str, float]] = Field(default_factory=dict)

    def get(self, name: str, default: float | None = None) -> float:
        found = self.constants.get(name)
        if found is not None:
            return found.value
        if default is None:
            raise KeyError(f"decode model constant {name!r} is missing")
        return default

    def with_values(self, values: Mapping[str, float]) -> DecodeConstants:
        updated = {
            name: c.model_copy(update={"value": values.get(name, c.value)})
            for name, c in self.constants.items()
        }
        return self.model_copy(update={"constants": updated})

    def format_group(self, weight_format: str) -> str:
        known = self.formats.get(weight_format.lower())
        return known.group if known else weight_format.lower()


class DecodeTerms(StrictModel):
    """Milliseconds per token, term by term, before the speculative gain."""

    efficiency: float
    weights_ms: float
    kv_ms: float
    layers_ms: float
    allreduce_ms: float
    allreduce_us: float
    hops_ms: float
    speculative_gain: float
    compute_ms: float = 0.0  # the step's matrix products at the compute ceiling

    @property
    def reads_ms(self) -> float:
        return self.weights_ms + self.kv_ms

    @property
    def compute_bound(self) -> bool:
        return self.compute_ms > self.reads_ms + self.layers_ms

    @property
    def total_ms(self) -> float:
        busy = max(self.reads_ms + self.layers_ms, self.compute_ms)
        return busy + self.allreduce_ms + self.hops_ms

    @property
    def tok_s(self) -> float:
        return 1e3 / self.total_ms * self.speculative_gain

    def shares(self) -> dict[str, float]:
        total = self.total_ms
        reads = {
            "weights": self.weights_ms,
            "kv cache": self.kv_ms,
            "per-layer overhead": self.layers_ms,
        }
        named = {
            **({"compute": self.compute_ms} if self.compute_bound else reads),
            "all-reduces": self.allreduce_ms,
            "pipeline hops": self.hops_ms,
        }
        return {name: ms / total for name, ms in named.items()}


def efficiency(inputs: DecodeInputs, k: DecodeConstants) -> float:
    """Share of nominal bandwidth the weight reads reach; never above 1."""
    group = k.format_group(inputs.weight_format)
    value = (
        k.get(f"efficiency.{inputs.hardware_class}")
        * k.get(f"engine.{inputs.engine}", 1.0)
        * k.get(f"format.{group}", 1.0)
    )
    if inputs.moe:  # a card's own mixture-of-experts kernel path for this format
        value *= k.get(f"moe.{inputs.hardware_class}.{inputs.weight_format.lower()}", 1.0)
    return min(value, 1.0)


def allreduce_us(inputs: DecodeInputs, k: DecodeConstants) -> float:
    """One all-reduce of the hidden state: latency per ring step plus the message on the link."""
    if inputs.tp == 1 or inputs.interconnect == "none":
        return 0.0
    kind = inputs.interconnect
    steps = 1 if kind == "nvlink" else max(math.log2(inputs.tp_nodes), 1)
    message = inputs.batch * inputs.hidden_size * ACTIVATION_BYTES * 2 * (inputs.tp - 1) / inputs.tp
    link = inputs.link_gb_s if kind == "nvlink" and inputs.link_gb_s else k.get(f"link_gb_s.{kind}")
    return k.get(f"allreduce_us.{kind}") * steps + message / (link * 1e3)


def step_weight_bytes(inputs: DecodeInputs, k: DecodeConstants) -> float:
    """Weights one step reads, whole model. Each stream past the first draws `expert_overlap`
    of a fresh routing (1: streams route independently; 0: all to the same experts)."""
    active, total = inputs.active_weight_bytes, inputs.total_weight_bytes
    if inputs.batch == 1 or not inputs.moe:
        return active
    draws = 1 + k.get("expert_overlap") * (inputs.batch - 1)
    experts, chosen = inputs.experts, inputs.experts_per_token
    per_expert = (total - active) / (experts - chosen) if experts and chosen else 0.0
    if not experts or not chosen or per_expert <= 0 or active < chosen * per_expert:
        # expert sizes unknown, or at odds with the active count: each draw reads the routed
        # part afresh, up to the whole checkpoint
        return min(active * draws, total) if total > active else active * draws
    union = experts * (1 - math.pow(1 - chosen / experts, draws))
    return active - chosen * per_expert + per_expert * union


def decode_terms(inputs: DecodeInputs, k: DecodeConstants) -> DecodeTerms:
    plain = _step_terms(inputs, k)
    if not inputs.speculative:
        return plain
    return plain.model_copy(update={"speculative_gain": speculative_gain(inputs, k, plain)})


def speculative_gain(inputs: DecodeInputs, k: DecodeConstants, plain: DecodeTerms) -> float:
    """Draft and verify: a one-layer draft head (MTP, EAGLE) proposes `draft_tokens` per stream,
    one target step checks them all (a batch of that many more positions; the KV cache read
    once), and each drafted token is accepted with `speculative_acceptance` while the run holds."""
    drafted, accept = inputs.draft_tokens, k.get("speculative_acceptance")
    emitted = (1 - accept ** (drafted + 1)) / (1 - accept)
    verify = _step_terms(inputs.model_copy(update={"batch": inputs.batch * (drafted + 1)}), k)
    verify_ms = verify.model_copy(update={"kv_ms": plain.kv_ms}).total_ms
    layer_bytes = inputs.active_weight_bytes / inputs.layers / inputs.tp
    kind = "moe" if inputs.moe else "attention"
    draft_layer_ms = layer_bytes / (inputs.bandwidth_gb_s * 1e6 * plain.efficiency)
    draft_ms = drafted * (draft_layer_ms + k.get(f"layer_us.{kind}") / 1e3)
    return emitted * plain.total_ms / (verify_ms + draft_ms)


def _step_terms(inputs: DecodeInputs, k: DecodeConstants) -> DecodeTerms:
    eff = efficiency(inputs, k)
    bytes_per_ms = inputs.bandwidth_gb_s * 1e6 * eff
    kv_read = inputs.kv_bytes_per_token * inputs.context_tokens
    kv_read /= inputs.tp if inputs.kv_split_by_tp else 1
    kv_read += inputs.state_bytes / inputs.tp
    kind = "moe" if inputs.moe else "attention"
    layer_us = k.get(f"layer_us.{kind}")
    ar_us = allreduce_us(inputs, k)
    allreduces = ALLREDUCES_PER_LAYER * inputs.layers if inputs.tp > 1 else 0
    compute_ms = 0.0
    if inputs.tensor_tflops is not None:
        flops_per_ms = inputs.tensor_tflops * 1e9 * k.get("compute_efficiency")
        compute_ms = inputs.batch * inputs.flops_per_token / inputs.tp / flops_per_ms
    return DecodeTerms(
        efficiency=eff,
        weights_ms=step_weight_bytes(inputs, k) / inputs.tp / bytes_per_ms,
        kv_ms=inputs.batch * kv_read / bytes_per_ms,
        layers_ms=inputs.layers * layer_us / 1e3,
        allreduce_ms=allreduces * ar_us / 1e3,
        allreduce_us=ar_us,
        hops_ms=(inputs.pp - 1) * k.get("pp_hop_us") / 1e3,
        speculative_gain=1.0,
        compute_ms=compute_ms,
    )


def ceiling_tok_s(inputs: DecodeInputs, terms: DecodeTerms, k: DecodeConstants) -> float:
    """Reads at face value bandwidth, products at the dense peak, the fabric as modelled, no
    per-layer overhead."""
    memory_ms = terms.reads_ms * terms.efficiency
    peak_ms = terms.compute_ms * k.get("compute_efficiency")
    busy = max(memory_ms, peak_ms)
    return 1e3 / (busy + terms.allreduce_ms + terms.hops_ms) * terms.speculative_gain


def outside_calibration(inputs: DecodeInputs, k: DecodeConstants) -> tuple[str, ...]:
    """What of this configuration no calibration row covers, in words."""
    cover = k.coverage
    hw, engine = inputs.hardware_class, inputs.engine
    group = k.format_group(inputs.weight_format)
    notes = []
    if hw not in cover.get("hardware", ()):
        notes.append(f"hardware class {hw!r} has no calibration row")
    elif f"{hw}/{engine}" not in cover.get("hardware_engine", ()):
        notes.append(f"no calibration row runs {engine} on {hw}")
    if f"{engine}/{group}" not in cover.get("engine_format", ()):
        notes.append(f"no calibration row runs {engine} with {group} weights")
    if inputs.moe and hw in cover.get("hardware", ()) and hw not in cover.get("hardware_moe", ()):
        notes.append(f"no calibration row runs a mixture-of-experts model on {hw}")
    if inputs.pp > 1:
        notes.append("no calibration row uses pipeline parallel: the hop time is assumed")
    if inputs.tp > 1 and inputs.interconnect not in cover.get("interconnect", ()):
        notes.append(f"no calibration row all-reduces over {inputs.interconnect}")
    if inputs.tp > 1 and engine not in cover.get("engine_tp", ()):
        notes.append(f"no calibration row runs {engine} with tensor parallel")
    if inputs.speculative and hw not in cover.get("speculative", ()):
        notes.append(f"no calibration row decodes speculatively on {hw}")
    return tuple(notes)


def tok_s_range(expected: float, outside: bool, k: DecodeConstants) -> tuple[float, float]:
    """The fit's leave-one-out spread around the expected value, wider outside the data."""
    low = math.exp(k.error.get("loo_p10_log", -0.3))
    high = math.exp(k.error.get("loo_p90_log", 0.3))
    if outside:
        widen = k.get("outside_widening", 1.5)
        low, high = low / widen, high * widen
    return expected * min(low, 1.0), expected * max(high, 1.0)


def leaning_rows(inputs: DecodeInputs, k: DecodeConstants) -> tuple[str, ...]:
    """The calibration rows behind this estimate: those of every fitted constant whose doubling
    moves it by over 5% (a constant the configuration does not use moves nothing)."""
    base = decode_terms(inputs, k).tok_s
    rows: set[str] = set()
    for name, constant in k.constants.items():
        if not constant.fit:
            continue
        doubled = decode_terms(inputs, k.with_values({name: 2 * constant.value})).tok_s
        if abs(math.log(doubled / base)) > 0.05:
            rows.update(constant.rows)
    return tuple(sorted(rows))


def dominant(terms: DecodeTerms) -> tuple[str, ...]:
    """The terms that make up at least a fifth of the token time, largest first."""
    shares = sorted(terms.shares().items(), key=lambda item: -item[1])
    named = [f"{name} {share:.0%}" for name, share in shares if share >= 0.2]
    return tuple(named or [f"{shares[0][0]} {shares[0][1]:.0%}"])

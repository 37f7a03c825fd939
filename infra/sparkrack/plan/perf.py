"""Single-stream decode speed: a bandwidth ceiling and an expected value, assumptions shown.

Decode is memory-bandwidth bound: each token reads the active weights once. With tensor parallel
each GPU reads 1/tp of them but every layer pass ends in an all-reduce (two per layer); with
pipeline parallel the stages run one after another and each hand-off is a hop. So

    token time = active bytes / tp / bandwidth  +  all-reduces x latency  +  hops x latency

The ceiling takes the memory time at face value; the expected value divides it by the profile's
decode efficiency (calibrated on seed 001: 40.4 tok/s where the ceiling says 86).
"""

from __future__ import annotations

from sparkrack.plan.fit import model_weight_bytes
from sparkrack.plan.parallel import ParallelLayout
from sparkrack.spec import ClusterSpec, HardwareProfile, StrictModel
from sparkrack.units import GB, decimal_bytes

ALLREDUCES_PER_LAYER = 2  # after attention and after the MLP / experts


class PerfEstimate(StrictModel):
    active_params: float
    active_weight_bytes: int  # read per token, whole model
    read_bytes_per_token_per_gpu: int  # per node on GB10
    memory_bandwidth_gb_s: float
    memory_ms: float
    allreduces_per_token: int
    allreduce_us: float
    allreduce_ms: float
    pp_hops_per_token: int
    pp_hop_us: float
    pp_ms: float
    decode_tok_s_ceiling: float
    decode_efficiency: float
    decode_tok_s_expected: float
    fabric_share: float  # of the expected token time, spent in all-reduces and hops
    assumptions: tuple[str, ...]


def plan_performance(spec: ClusterSpec, layout: ParallelLayout) -> PerfEstimate:
    model = spec.model
    profile = min(
        (spec.hardware(node) for node in spec.nodes), key=lambda p: p.memory_bandwidth_gb_s
    )
    tp, pp = layout.tensor_parallel_size, layout.pipeline_parallel_size
    active = model.active_params or model.total_params
    active_bytes = round(active * model_weight_bytes(model) / model.total_params)
    memory_ms = active_bytes / tp / (profile.memory_bandwidth_gb_s * GB) * 1e3
    allreduces = ALLREDUCES_PER_LAYER * model.layers if tp > 1 else 0
    allreduce_us = _allreduce_us(profile, layout)
    allreduce_ms = allreduces * allreduce_us / 1e3
    hops = pp - 1
    pp_ms = hops * profile.pp_hop_us / 1e3
    ceiling_ms = memory_ms + allreduce_ms + pp_ms
    expected_ms = memory_ms / profile.decode_efficiency + allreduce_ms + pp_ms
    return PerfEstimate(
        active_params=active,
        active_weight_bytes=active_bytes,
        read_bytes_per_token_per_gpu=round(active_bytes / tp / pp),
        memory_bandwidth_gb_s=profile.memory_bandwidth_gb_s,
        memory_ms=memory_ms,
        allreduces_per_token=allreduces,
        allreduce_us=allreduce_us,
        allreduce_ms=allreduce_ms,
        pp_hops_per_token=hops,
        pp_hop_us=profile.pp_hop_us,
        pp_ms=pp_ms,
        decode_tok_s_ceiling=1e3 / ceiling_ms,
        decode_efficiency=profile.decode_efficiency,
        decode_tok_s_expected=1e3 / expected_ms,
        fabric_share=(allreduce_ms + pp_ms) / expected_ms,
        assumptions=_assumptions(spec, profile, layout, active_bytes, allreduce_us),
    )


def _allreduce_us(profile: HardwareProfile, layout: ParallelLayout) -> float:
    if layout.tensor_parallel_size == 1:
        return 0.0
    if layout.tp_interconnect == "nvlink" and profile.nvlink_allreduce_us is not None:
        return profile.nvlink_allreduce_us
    # A ring all-reduce takes 2(n-1) steps: the two-rank figure grows by one for each extra node.
    nodes = max(len(stage.nodes) for stage in layout.stages)
    return profile.fabric_allreduce_us * max(nodes - 1, 1)


def _assumptions(
    spec: ClusterSpec,
    profile: HardwareProfile,
    layout: ParallelLayout,
    active_bytes: int,
    allreduce_us: float,
) -> tuple[str, ...]:
    model = spec.model
    tp, pp = layout.tensor_parallel_size, layout.pipeline_parallel_size
    active = model.active_params or model.total_params
    notes = [
        f"decode reads the active weights once per token: {active / 1e9:.3g}B parameters,"
        f" {decimal_bytes(active_bytes)}, split over tp {tp}",
        f"memory bandwidth {profile.memory_bandwidth_gb_s:g} GB/s per GPU",
        "KV-cache reads left out: a short context (long ones decode slower)",
        f"expected = memory time / decode efficiency {profile.decode_efficiency:g} (profile)",
    ]
    if tp > 1:
        notes.append(
            f"{ALLREDUCES_PER_LAYER} all-reduces per layer at {allreduce_us:g} us each"
            f" over {layout.tp_interconnect}"
        )
    if pp > 1:
        notes.append(f"{pp - 1} pipeline hops per token at {profile.pp_hop_us:g} us each (assumed)")
    return tuple(notes)

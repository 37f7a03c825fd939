"""Where adding streams stops paying, from both limits (issue 36, round 2): the memory system
(bandwidth, the KV cache's room) and compute (each profile's dense tensor TFLOPS), the one that
binds named in the estimate and its JSON."""

from __future__ import annotations

import json

import pytest

from sparkrack.cli import main
from sparkrack.config.load import spec_for_estimate
from sparkrack.estimate.calibration import shipped_constants
from sparkrack.estimate.concurrency import level
from sparkrack.plan import DecodeOptions, estimate
from sparkrack.plan.perf import PerfEstimate

pytestmark = pytest.mark.unit


def concurrency(
    hardware: str, nodes: int, model: str, streams: int, context: int = 1024
) -> PerfEstimate:
    spec = spec_for_estimate(hardware=hardware, nodes=nodes, model=model)
    options = DecodeOptions(concurrency=streams, context_tokens=context)
    return estimate(spec, options).performance


def test_a_dense_model_at_short_context_saturates_where_its_steps_turn_compute_bound() -> None:
    # Gemma 3 27B FP8 on one 8xH100 server, 64-token caches: the weights are read once for every
    # stream and the caches are small, so the products outgrow the reads at a few hundred streams.
    perf = concurrency("h100-8", 1, "gemma-3-27b-fp8", 64, context=64)
    c = perf.concurrency

    assert perf.compute_precision == "fp8" and perf.tensor_tflops == 1979
    assert c.knee_limit == "compute" and c.compute_bound_streams is not None
    assert c.knee_streams == c.compute_bound_streams < c.kv_streams_fit
    assert "compute-bound" in c.knee_reason
    k, inputs = shipped_constants(), perf.inputs
    before, at = (level(inputs, k, n) for n in (c.knee_streams - 1, c.knee_streams))
    assert (before.bound, at.bound) == ("memory", "compute")
    # past it the aggregate is flat: doubling the streams halves each one's speed
    doubled = level(inputs, k, 2 * c.knee_streams)
    assert doubled.aggregate_tok_s < 1.1 * at.aggregate_tok_s
    assert doubled.per_request_tok_s < 0.6 * at.per_request_tok_s


def test_the_compute_ceiling_is_the_replicas_gpus_at_the_dense_peak_times_the_share() -> None:
    perf = concurrency("h100-8", 1, "gemma-3-27b-fp8", 64, context=64)
    share = shipped_constants().get("compute_efficiency")
    c = perf.concurrency

    # 2 FLOPs a parameter, plus QK and PV over the 64 cached positions of 62 GQA layers
    assert perf.inputs.flops_per_token == 2 * 27.4e9 + 62 * 4 * 32 * 128 * 64
    gpus = perf.inputs.tp * perf.inputs.pp
    assert c.compute_ceiling_tok_s == pytest.approx(
        gpus * 1979e12 * share / perf.inputs.flops_per_token
    )
    assert c.compute_ceiling_tok_s is not None and 0 < share < 1
    assert all(s.aggregate_tok_s < c.compute_ceiling_tok_s for s in c.levels)


def test_minimax_on_two_gx10_is_held_by_its_kv_cache_long_before_compute() -> None:
    # At 1,024 tokens a stream's KV reads take longer than its products on GB10: the aggregate
    # still climbs at 256 streams because the experts, once all read, are shared by every stream;
    # what stops it is the room for caches, and the estimate says compute is far off.
    c = concurrency("gx10", 2, "minimax-m2.7-awq", 4).concurrency

    assert c.knee_limit == "kv cache" and c.knee_streams <= c.kv_streams_fit
    assert c.compute_bound_streams is None
    assert "compute" in c.knee_reason
    assert c.compute_ceiling_tok_s is not None
    assert c.compute_ceiling_tok_s > 10 * c.knee_aggregate_tok_s
    assert all(s.bound == "memory" for s in c.levels)


def test_a_longer_context_lowers_the_kv_limit_and_the_knee_with_it() -> None:
    short = concurrency("gx10", 2, "minimax-m2.7-awq", 4, context=1024).concurrency
    long = concurrency("gx10", 2, "minimax-m2.7-awq", 4, context=32768).concurrency

    assert long.kv_streams_fit < short.kv_streams_fit / 16
    assert long.knee_streams < short.knee_streams
    assert long.knee_limit in ("kv cache", "memory bandwidth")


@pytest.mark.parametrize(
    ("hardware", "model", "precision", "tflops"),
    [
        ("gx10", "minimax-m2.7-awq", "bf16", 125),  # AWQ: Marlin multiplies in 16 bits
        ("gx10", "gemma-3-27b-fp8", "fp8", 250),
        ("b200-8", "kimi-k3", "fp4", 9000),  # MXFP4 on Blackwell
        ("h100-8", "minimax-m2.7-awq", "bf16", 989.5),
        ("h20-8", "gemma-3-27b-fp8", "fp8", 296),
        ("gb200-4", "gemma-3-27b-fp8", "fp8", 5000),
    ],
)
def test_the_products_run_at_the_weights_precision_where_the_card_has_it(
    hardware: str, model: str, precision: str, tflops: float
) -> None:
    perf = estimate(spec_for_estimate(hardware=hardware, nodes=2, model=model)).performance

    assert (perf.compute_precision, perf.tensor_tflops) == (precision, tflops)


def test_fp4_weights_on_hopper_multiply_in_16_bits() -> None:
    spec = spec_for_estimate(hardware="h200-8", nodes=2, model="kimi-k3")

    perf = estimate(spec).performance

    assert perf.inputs.weight_format == "mxfp4"
    assert (perf.compute_precision, perf.tensor_tflops) == ("bf16", 989.5)


def test_a_profile_without_tensor_figures_has_no_compute_ceiling() -> None:
    spec = spec_for_estimate(hardware="gx10", nodes=2, model="minimax-m2.7-awq")
    profiles = {
        name: profile.model_copy(update={"tensor_tflops": {}})
        for name, profile in spec.hardware_profiles.items()
    }
    spec = spec.model_copy(update={"hardware_profiles": profiles})

    perf = estimate(spec, DecodeOptions(concurrency=4)).performance

    assert perf.tensor_tflops is None and perf.compute_ms == 0
    assert perf.concurrency.compute_ceiling_tok_s is None
    assert perf.concurrency.compute_bound_streams is None
    assert "no tensor TFLOPS" in " ".join(perf.assumptions)


def test_estimate_json_carries_both_limits_and_which_binds(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["estimate", "--model", "gemma-3-27b-fp8", "--hardware", "h100-8", "--json"]

    assert main([*argv, "--concurrency", "32", "--decode-context", "64"]) == 0
    result = json.loads(capsys.readouterr().out)

    c = result["concurrency"]
    assert c["knee_limit"] == "compute"
    assert c["compute_ceiling_tok_s"] > c["knee_aggregate_tok_s"] > c["aggregate_tok_s"]
    assert c["compute_bound_streams"] == c["knee_streams"]
    assert c["kv_streams_fit"] > c["knee_streams"]
    assert {s["bound"] for s in c["levels"]} == {"memory", "compute"}
    assert result["compute_precision"] == "fp8" and result["tensor_tflops"] == 1979
    assert result["decode_inputs"]["flops_per_token"] > 2 * 27e9


def test_the_text_estimate_names_the_limit_that_binds(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["estimate", "--model", "minimax-m2.7-awq", "--hardware", "gx10", "--nodes", "2"]

    assert main([*argv, "--concurrency", "4"]) == 0
    out = capsys.readouterr().out

    assert "bound by kv cache" in out
    assert "compute ceiling" in out and "hidden under the reads" in out
    assert "route to the same experts" in out

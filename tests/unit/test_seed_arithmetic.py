"""The seeds' arithmetic, reproduced from the catalogue (issue 3, acceptance)."""

from __future__ import annotations

import pytest

from sparkrack.config.load import load_stack_file, spec_for_estimate
from sparkrack.estimate.calibration import shipped_constants
from sparkrack.estimate.decode import step_weight_bytes
from sparkrack.plan import DecodeOptions, estimate, make_plan
from sparkrack.plan.parallel import balanced_partition

from .support import STACKS, cluster, refusal

pytestmark = pytest.mark.unit

GIB = 2**30


def test_kimi_k3_weights_and_runtime_budget() -> None:
    fit = make_plan(load_stack_file("h200-2", STACKS)).fit

    # 2.8T x 0.53 bytes/parameter ~ 1.5 TB; the shards as released total 1.56 TB.
    estimated = fit.estimated_weight_bytes
    assert estimated == pytest.approx(1.484e12)
    assert estimated is not None and round(estimated / 1e12, 1) == 1.5
    assert fit.weight_bytes == 1_560_000_000_000
    # x 1.18 ~ 1.84 TB (seed 002)
    assert fit.runtime_budget_factor == 1.18
    assert fit.runtime_budget_bytes == pytest.approx(1.8408e12)


def test_kimi_k3_does_not_fit_one_h200_server() -> None:
    one = estimate(spec_for_estimate(hardware="h200-8", nodes=1, model="kimi-k3")).fit

    assert one.total_memory_bytes == 1_128_000_000_000
    assert not one.fits
    assert one.runtime_budget_bytes - one.total_memory_bytes == pytest.approx(712.8e9)
    assert "2 nodes of h200-8 (tp 8 x pp 2)" in one.would_fit


def test_kimi_k3_fits_two_h200_servers_with_700_gb_left() -> None:
    two = make_plan(load_stack_file("h200-2", STACKS)).fit

    assert two.fits
    assert two.total_memory_bytes == 2_256_000_000_000
    # ~700 GB for KV cache and runtime after the weights (seed 002)
    assert two.after_weights_bytes == 696_000_000_000


def test_one_h200_stack_is_refused_with_the_shortfall_and_what_would_fit() -> None:
    raw = cluster("h200-2")
    raw["nodes"] = raw["nodes"][:1]
    del raw["fabric"]
    raw["serving"]["pipeline_parallel_size"] = 1

    message = refusal("h200-2", raw)

    assert message.startswith("stack h200-2: model: kimi-k3 does not fit 1 x h200-8")
    assert "needs 1.84 TB (1.56 TB of weights x 1.18 runtime budget)" in message
    assert "they have 1.13 TB, 713 GB short" in message
    assert "2 nodes of h200-8 (tp 8 x pp 2)" in message
    assert "~2.7 bits per parameter" in message  # 1,128 GB / 1.18 over 2.8T parameters
    assert "not a shorter context" in message


def test_minimax_fits_two_gb10_at_080_with_131072_context() -> None:
    plan = make_plan(load_stack_file("gb10-2", STACKS))
    fit = plan.fit

    assert fit.fits
    assert fit.weight_bytes == 122_000_000_000
    assert fit.max_model_len == 131072
    # 2 x 121.6 GiB x 0.80 = 194.56 GiB for weights, KV cache and activations (seed 001)
    assert fit.available_bytes / GIB == pytest.approx(194.56)
    # GQA: 2 (K, V) x 62 layers x 8 KV heads x 128 x 2 bytes
    assert fit.kv_bytes_per_token == 253_952
    assert fit.kv_bytes_per_sequence == 253_952 * 131072
    assert fit.tightest_gpu.headroom_bytes == pytest.approx(24.66e9, rel=1e-3)
    assert fit.max_sequences_at_max_model_len == 2


def test_minimax_tp2_all_reduces_and_bytes_per_node() -> None:
    perf = make_plan(load_stack_file("gb10-2", STACKS)).performance

    assert perf.allreduces_per_token == 124  # 62 layers x 2
    # 10B active x (122 GB / 230B) / 2 nodes
    assert round(perf.read_bytes_per_token_per_gpu / 1e9, 2) == 2.65
    # The fitted RoCE all-reduce (~25 us, from C21/C23/C24) is above seed 001's 15 us estimate,
    # as the published two-box runs show; the fabric still carries a small share of the token.
    assert 15 < perf.allreduce_us < 40
    assert 0.05 < perf.fabric_share < 0.2


def test_seed_001_minimax_on_two_gx10_within_15_percent() -> None:
    # Seed 001 measured 40.4 tok/s warm; the fit never saw this run (it is not a calibration row).
    perf = make_plan(load_stack_file("gb10-2", STACKS)).performance

    assert perf.decode_tok_s_expected == pytest.approx(40.4, rel=0.15)
    assert perf.decode_tok_s_low < 40.4 < perf.decode_tok_s_high
    assert perf.decode_tok_s_ceiling > 40.4  # a ceiling below a measurement is a wrong model
    assert perf.engine == "vllm" and perf.weight_format == "awq-4bit"
    assert perf.outside_calibration == ()


def test_seed_004_kimi_k3_on_sixteen_gb10_at_pp16_near_20_tok_s() -> None:
    # Seed 004 measured ~20 tok/s single stream on 16 DGX Spark, one layer range per box.
    # K3's active parameters are DERIVED from that run (kimi-k3.yaml): a consistency check that
    # the catalogue, the layout and the model agree, not an independent validation.
    plan = make_plan(load_stack_file("gb10-16", STACKS))
    perf = plan.performance

    assert plan.layout.pipeline_parallel_size == 16
    assert perf.pp_hops_per_token == 15
    assert perf.decode_tok_s_expected == pytest.approx(20, rel=0.15)
    assert perf.decode_tok_s_ceiling > 20
    assert perf.dominant_terms[0].startswith("weights")
    assert "no calibration row uses pipeline parallel" in perf.outside_calibration[0]


def test_seed_002_kimi_k3_on_two_h200_servers_is_per_layer_bound() -> None:
    # On 8-GPU HBM servers at batch 1 a fixed time per layer dominates (H2, H4, H9): the estimate
    # stays near the ~90-120 tok/s published for 1T-class MoE models on one such server.
    perf = make_plan(load_stack_file("h200-2", STACKS)).performance

    assert 60 < perf.decode_tok_s_expected < 130
    assert perf.dominant_terms[0].startswith("per-layer overhead")
    assert perf.decode_tok_s_ceiling > 3 * perf.decode_tok_s_expected


def test_dense_27b_reading_28_gb_per_token_tops_out_near_10_tok_s_on_one_gb10() -> None:
    spec = spec_for_estimate(hardware="gb10", nodes=1, model="gemma-3-27b-fp8")
    dense = estimate(spec, DecodeOptions(context_tokens=0))

    assert dense.performance.read_bytes_per_token_per_gpu == 28_000_000_000
    assert dense.performance.allreduces_per_token == 0
    # weights alone at 273 GB/s: the seed's ~10 tok/s ceiling
    assert dense.performance.decode_tok_s_ceiling == pytest.approx(9.75, abs=0.01)
    # at 1024 tokens of context its KV cache is read too: a little lower
    at_1024 = estimate(spec).performance
    assert at_1024.decode_tok_s_ceiling < dense.performance.decode_tok_s_ceiling


def test_dense_27b_at_16_bits_reads_twice_that_and_is_slower_still() -> None:
    # The issue says "at 16 bits"; the seed's 28 GB per token is 27B at about one byte each.
    # At bf16 the same model reads 54.8 GB per token: half the speed.
    spec = spec_for_estimate(hardware="gb10", nodes=1, model="gemma-3-27b")
    dense = estimate(spec, DecodeOptions(context_tokens=0))

    assert dense.performance.read_bytes_per_token_per_gpu == 54_800_000_000
    assert dense.performance.decode_tok_s_ceiling == pytest.approx(4.98, abs=0.01)


def test_the_230b_moe_beats_the_27b_dense_model_on_the_same_boxes() -> None:
    moe = make_plan(load_stack_file("gb10-2", STACKS)).performance
    dense = estimate(spec_for_estimate(hardware="gx10", nodes=2, model="gemma-3-27b-fp8"))

    # Dense reads every parameter per token; the MoE only its ~10B active ones (seed 001).
    assert moe.decode_tok_s_ceiling > 4 * dense.performance.decode_tok_s_ceiling


def test_sixteen_nodes_split_kimi_k3_layers_evenly() -> None:
    layout = make_plan(load_stack_file("gb10-16", STACKS)).layout

    assert layout.pipeline_parallel_size == 16
    assert sum(layout.layer_partition) == 93
    assert max(layout.layer_partition) - min(layout.layer_partition) == 1
    assert layout.layer_partition == (5, 5, *[6] * 13, 5)
    assert layout.vllm_pp_layer_partition == "5,5,6,6,6,6,6,6,6,6,6,6,6,6,6,5"
    assert [stage.first_layer for stage in layout.stages][:4] == [0, 5, 10, 16]


@pytest.mark.parametrize(
    ("layers", "stages"),
    [
        (layers, stages)
        for layers in (1, 7, 62, 93, 94)
        for stages in (1, 2, 3, 4, 5, 16)
        if stages <= layers
    ],
)
def test_every_partition_sums_to_the_layers_and_differs_by_at_most_one(
    layers: int, stages: int
) -> None:
    partition = balanced_partition(layers, stages)

    assert len(partition) == stages
    assert sum(partition) == layers
    assert max(partition) - min(partition) <= 1
    # The first and last stages carry the embedding and the LM head: they are the light ones
    # whenever there are at least two light stages to hand out.
    light_stages = stages - layers % stages
    assert partition[0] == min(partition)
    assert partition[-1] == min(partition) or light_stages < 2


def test_kimi_k3_kv_cache_counts_mla_latents_and_linear_state() -> None:
    fit = make_plan(load_stack_file("gb10-16", STACKS)).fit

    # 24 MLA layers x (512 + 64) x 2 bytes per token; tp 1, so no replication
    assert fit.kv_bytes_per_token == 24 * 576 * 2
    # 69 KDA layers x 64 heads x 128 x 128 x 4 bytes of fp32 state, per sequence, not per token
    assert fit.state_bytes_per_sequence == 69 * 64 * 128 * 128 * 4
    assert fit.fits


def test_seed_001_four_agents_sit_between_independent_and_shared_routing() -> None:
    # Seed 001: 40.4 tok/s for one stream, 115.6 tok/s for four agents together. Neither is a
    # calibration row. Four streams are estimated as benchmark streams (each draws expert_overlap
    # of a fresh routing, fitted on kubis.ai's and the forum's c4/c16 runs): 27% under the seed.
    # That gap is the workload's, not the hardware's (the next test): four streams routing like
    # benchmark streams cannot reach 115.6 on two GB10, so the seed's agents shared experts; the
    # estimate's bound for streams that route alike lies above it.
    spec = spec_for_estimate(hardware="gx10", nodes=2, model="minimax-m2.7-awq")
    one = estimate(spec).performance
    four = estimate(spec, DecodeOptions(concurrency=4)).performance.concurrency

    assert one.concurrency.streams == 1
    assert one.concurrency.aggregate_tok_s == pytest.approx(40.4, rel=0.15)
    assert four.aggregate_tok_s == pytest.approx(115.6, rel=0.30)
    assert four.aggregate_tok_s < 115.6 < four.shared_routing_aggregate_tok_s
    assert four.per_request_tok_s < one.decode_tok_s_expected < four.aggregate_tok_s
    assert four.fits and four.kv_streams_fit >= 4


def test_four_benchmark_like_streams_cannot_reach_seed_001s_figure_at_273_gb_s() -> None:
    # From the seed's own single-stream step (1 / 40.4 s), four streams add the experts their
    # routings do not share. Read at the full 273 GB/s (no engine reaches it), KV caches left out,
    # those bytes alone hold four streams routing like benchmark streams under 105 tok/s, and
    # fully independent ones under 95: the seed's 115.6 needs fewer distinct experts than either.
    spec = spec_for_estimate(hardware="gx10", nodes=2, model="minimax-m2.7-awq")
    inputs, k = estimate(spec).performance.inputs, shipped_constants()
    alone = step_weight_bytes(inputs, k)

    def best_case(overlap: float) -> float:
        four = inputs.model_copy(update={"batch": 4})
        extra = step_weight_bytes(four, k.with_values({"expert_overlap": overlap})) - alone
        return 4 / (1 / 40.4 + extra / inputs.tp / 273e9)

    assert best_case(k.get("expert_overlap")) < 105 < 115.6
    assert best_case(1.0) < 95


def test_seed_002_k3_on_two_h200_servers_holds_a_few_128k_streams_not_many() -> None:
    # Seed 002: ~700 GB left after the weights, "suitable for 128K context with careful
    # concurrency": a handful of full-length streams fit, far more short ones.
    spec = spec_for_estimate(hardware="h200-8", nodes=2, model="kimi-k3")
    long = estimate(spec, DecodeOptions(context_tokens=131072, concurrency=8))
    short = estimate(spec, DecodeOptions(context_tokens=8192, concurrency=8))

    long_c, short_c = long.performance.concurrency, short.performance.concurrency
    assert 1 <= long_c.kv_streams_fit < 8 and not long_c.fits
    assert short_c.kv_streams_fit > 8 * long_c.kv_streams_fit
    assert long_c.knee_streams <= long_c.kv_streams_fit


def test_seed_004_k3_at_pp16_gains_from_streams_the_pipeline_would_idle_on() -> None:
    plan = make_plan(load_stack_file("gb10-16", STACKS))
    one = plan.performance
    eight = estimate(
        spec_for_estimate(hardware="gb10", nodes=16, model="kimi-k3", tensor_parallel_size=1),
        DecodeOptions(concurrency=8),
    ).performance

    assert one.decode_tok_s_expected == pytest.approx(20, rel=0.15)
    assert eight.concurrency.aggregate_tok_s > 2 * one.decode_tok_s_expected

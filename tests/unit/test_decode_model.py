"""The decode model: fitted to published runs, every constant sourced, the fit re-runnable, and a
bench run turned into a calibration row that refits it (issue 19)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml

from sparkrack.cli import main
from sparkrack.config.decode_files import CalibrationError, read_rows
from sparkrack.config.load import load_stack_file
from sparkrack.estimate.calibration import CalibrationRow, predict, shipped_constants, shipped_rows
from sparkrack.estimate.decode_fit import fit, leave_one_card_out, refit
from sparkrack.ops.bench.calibration import calibration_row
from sparkrack.ops.bench.measure import BenchResult, BenchSettings, Prediction, RequestSample
from sparkrack.ops.bench.store import save
from sparkrack.plan import make_plan

from .support import STACKS, cluster, plan_of, refusal

pytestmark = pytest.mark.unit


def test_the_published_rows_are_in_the_repository_with_their_setup_and_sources() -> None:
    rows = shipped_rows()

    assert len(rows) >= 27  # issue 19's set, grown by issue 36
    assert len({row.id for row in rows}) == len(rows)
    assert all(row.source and row.tok_s > 0 and row.engine and row.card for row in rows)
    assert {row.card for row in rows} >= {"gb10", "h100", "h200", "b200"}
    # a batch of an MoE reads the union of its experts: every such row says how many there are
    batched_moe = [row for row in rows if row.concurrency > 1 and row.moe]
    assert batched_moe and all(row.experts and row.experts_per_token for row in batched_moe)
    # seed 001 and seed 004 are not calibration rows: their tests are checks, not echoes
    assert not any("seed" in row.source for row in rows)


@pytest.mark.parametrize("row", shipped_rows(), ids=lambda row: row.id)
def test_each_row_is_within_the_error_the_fit_reports(row: CalibrationRow) -> None:
    k = shipped_constants()
    reported = k.rows[row.id]

    error_pct = 100 * (predict(row, k) / row.tok_s - 1)
    assert reported["measured"] == row.tok_s
    assert abs(error_pct) <= abs(reported["error_pct"]) + 0.1
    if row.weight > 0:
        assert abs(error_pct) <= k.error["max_abs_pct"] + 0.1


def test_the_fit_reports_a_median_error_and_most_rows_are_close() -> None:
    k = shipped_constants()
    in_fit = [rid for rid in k.rows if next(r for r in shipped_rows() if r.id == rid).weight > 0]
    errors = sorted(abs(k.rows[rid]["error_pct"]) for rid in in_fit)

    assert k.error["median_abs_pct"] < 12
    assert k.error["loo_median_abs_pct"] < 25
    # Only the rows kept out of the fit, which their own sources call odd, are far off: H11
    # (B200's DeepGEMM fixed-latency floor) and H16 (a vision model's cross-attention layers).
    far = {rid for rid, row in k.rows.items() if abs(row["error_pct"]) > 30}
    assert far == {"H11", "H16"}
    assert errors[len(errors) // 2] < 12


def test_leave_one_card_out_is_what_the_fit_reports_and_under_25_percent() -> None:
    rows, k = shipped_rows(), shipped_constants()

    again = leave_one_card_out(rows, k)

    for row, residual in zip(rows, again, strict=True):
        assert k.rows[row.id]["loco_error_pct"] == pytest.approx(
            100 * (math.exp(-residual) - 1), abs=0.15
        ), row.id
    # Issue 36 aims at 20%; the fit reaches what decode_model.yaml says (README's table)
    assert k.error["loco_median_abs_pct"] < 25


def test_batched_rows_are_predicted_at_their_concurrency_not_by_a_flat_factor() -> None:
    k = shipped_constants()
    solo = {row.concurrency: row for row in shipped_rows() if row.id.startswith("C19")}

    single, four, sixteen = (predict(solo[c], k) for c in (1, 4, 16))
    # per request falls, together rises, and each within 20% of what kubis.ai measured
    assert single > four > sixteen
    assert single < 4 * four < 16 * sixteen
    for c, predicted in ((4, four), (16, sixteen)):
        assert predicted == pytest.approx(solo[c].tok_s, rel=0.2)


def test_refitting_the_shipped_rows_gives_the_shipped_constants() -> None:
    k = shipped_constants()
    again = fit(shipped_rows(), k)

    for name, constant in k.constants.items():
        assert again.get(name) == pytest.approx(constant.value, rel=0.01), name


def test_every_constant_has_a_source_and_fitted_ones_name_their_rows() -> None:
    k = shipped_constants()

    assert all(len(c.source) > 10 for c in k.constants.values())
    assert all(c.rows for c in k.constants.values() if c.fit)
    markers = ("ASSUMED", "seed", "NVIDIA", "calibration", "reference", "judgement", "no constant")
    fixed = [c.source for c in k.constants.values() if not c.fit]
    assert all(any(marker in source for marker in markers) for source in fixed)
    # Few constants for the rows: grouped, not one per row.
    assert sum(c.fit for c in k.constants.values()) <= 18


def test_a_hardware_profile_with_the_old_flat_efficiency_is_told_where_it_went() -> None:
    raw = cluster("gb10-2")
    raw["hardware_profiles"] = {"mine": {"base": "gb10", "decode_efficiency": 0.5}}
    raw["nodes"][0]["hardware"] = "mine"

    message = refusal("gb10-2", raw)

    assert "decode_efficiency: decode constants now live in catalog/decode_model.yaml" in message


def bench_of(stack: str, decodes: list[float]) -> BenchResult:
    plan = make_plan(load_stack_file(stack, STACKS))
    settings = BenchSettings(
        stack=stack, endpoint="http://198.18.0.11:8000", model="m", prompt_tokens=512,
        max_tokens=256, repetitions=len(decodes), warmups=1, concurrency=(1,),
    )  # fmt: skip
    samples = tuple(
        RequestSample(
            decode_tok_s=d, end_to_end_tok_s=d, ttft_s=0.1, completion_tokens=256, prompt_tokens=512
        )
        for d in decodes
    )
    return BenchResult(
        started_utc="2026-12-02T10:00:00Z",
        settings=settings,
        cold=(),
        single=samples,
        levels=(),
        prediction=Prediction.of(plan.performance),
    )


def test_a_bench_run_becomes_a_calibration_row_the_model_predicts_like_the_plan() -> None:
    result = bench_of("gb10-2", [40.4, 40.2, 40.6])

    row = CalibrationRow.model_validate(calibration_row(result))

    assert row.tok_s == 40.4
    assert row.context_tokens == 512 + 128
    assert row.moe and row.tp == 2 and row.interconnect == "roce"
    # the row, predicted on its own, is the plan's estimate (context aside)
    plan = make_plan(load_stack_file("gb10-2", STACKS)).performance
    assert predict(row, shipped_constants()) == pytest.approx(plan.decode_tok_s_expected, rel=0.03)


def test_bench_writes_the_row_beside_its_json_and_estimate_refits_with_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A rack 30% slower than the published runs say: the refit moves the estimate toward it.
    save(bench_of("gb10-2", [30.0, 30.5, 29.5]), tmp_path)
    written = tmp_path / "2026-12-02T10-00-00Z.calibration.yaml"
    assert yaml.safe_load(written.read_text())["rows"][0]["tok_s"] == 30.0

    argv = ["estimate", "--model", "minimax-m2.7-awq", "--hardware", "gx10", "--nodes", "2"]
    assert main([*argv, "--json"]) == 0
    before = json.loads(capsys.readouterr().out)["decode_tok_s_expected"]
    assert main([*argv, "--calibration", str(written), "--json"]) == 0
    captured = capsys.readouterr()
    after = json.loads(captured.out)["decode_tok_s_expected"]

    assert "refitting the decode model with 1 rows of yours" in captured.err
    # most of the way, not all: one rack row weighs three published rows, against 27 of them
    assert abs(after - 30.0) < 0.5 * abs(before - 30.0)


def test_a_file_that_is_not_calibration_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "x.yaml"
    bad.write_text("rows: [{id: 1}]\n")

    with pytest.raises(CalibrationError, match=r"x\.yaml: not a calibration file"):
        read_rows([bad])


def test_refit_with_only_the_shipped_rows_keeps_the_error_block() -> None:
    refitted = refit(shipped_rows(), shipped_constants(), with_loo=False)

    assert refitted.error["median_abs_pct"] == shipped_constants().error["median_abs_pct"]
    assert set(refitted.rows) == {row.id for row in shipped_rows()}


def test_speculative_decoding_pays_by_acceptance_and_costs_its_drafts() -> None:
    # H12 (8xH200) and H13 (8xB200), MTP=3: the gain rises with the acceptance rate; a draft
    # head that is almost never right makes decoding slower, not faster.
    k = shipped_constants()
    for row in (r for r in shipped_rows() if r.speculative):
        plain = predict(row.model_copy(update={"speculative": False}), k)
        gains = [
            predict(row, k.with_values({"speculative_acceptance": a})) / plain
            for a in (0.1, 0.5, 0.9)
        ]
        assert gains[0] < 1 < gains[1] < gains[2] < row.draft_tokens + 1, row.id
        assert predict(row, k) == pytest.approx(row.tok_s, rel=0.2), row.id


def test_a_stacks_speculative_config_names_how_many_tokens_are_drafted() -> None:
    raw = cluster("gb10-2")
    config = '{"method": "mtp", "num_speculative_tokens": 2}'
    raw["serving"]["extra_args"] = ["--speculative-config", config]

    perf = plan_of("gb10-2", raw).performance

    assert perf.inputs.speculative and perf.inputs.draft_tokens == 2
    assert perf.speculative_gain != 1


def test_a_speculative_stack_loads_its_draft_head_beside_the_weights() -> None:
    plain = make_plan(load_stack_file("gb10-2", STACKS)).fit
    raw = cluster("gb10-2")
    raw["serving"]["extra_args"] = ["--speculative-config", '{"method": "mtp"}']

    drafting = plan_of("gb10-2", raw).fit

    # one of MiniMax's 62 layers' share of the 122 GB checkpoint
    assert plain.draft_weight_bytes == 0
    assert drafting.draft_weight_bytes == round(122e9 / 62)
    assert drafting.weight_bytes == plain.weight_bytes + drafting.draft_weight_bytes
    assert drafting.tightest_gpu.headroom_bytes < plain.tightest_gpu.headroom_bytes


# Held out of the fit, the batch term's check on the kernel path seed 001 runs: Qwen3-235B-A22B
# GPTQ-Int4 through vLLM's Marlin MoE on two GB10 at TP=2 over RoCE (EP=2, which the model does not
# describe), "| 1 (serial) | 256 | 17.0 | 17.0 |", "| 2 (concurrent) | 256 | 12.1 | 24.1 |",
# "| 4 (concurrent) | 256 | 9.1 | 36.4 |" (https://conselara.dev/notes/dgx-spark-benchmarks/,
# vLLM 0.19.0, fp8 KV cache; prompt length not stated, ~1k ASSUMED).
MARLIN_PAIR = {
    "model": "Qwen3-235B-A22B GPTQ-Int4",
    "total_params": "235B",
    "active_params": "22B",
    "weight_bytes": "123.8 GB",  # "Weight resident per node: 57.64 GiB", x 2
    "layers": 94,
    "hidden_size": 4096,
    "kv_bytes_per_token": 2 * 94 * 4 * 128,  # 4 KV heads of 128, fp8
    "experts": 128,
    "experts_per_token": 8,
    "hardware": "2x DGX Spark",
    "card": "gb10",
    "hardware_class": "gb10",
    "bandwidth_gb_s": 273,
    "engine": "vllm",
    "weight_format": "gptq",
    "tp": 2,
    "interconnect": "roce",
    "tp_nodes": 2,
    "context_tokens": 1024 + 128,
    "source": "https://conselara.dev/notes/dgx-spark-benchmarks/",
}


def test_a_held_out_marlin_moe_pair_slows_with_streams_as_the_model_says() -> None:
    # Four streams on the same kernels and boxes as seed 001 run at 0.54 of one stream's speed
    # each; the model says 0.53. Seed 001's four agents ran at 0.72 (28.9 / 40.4): a workload whose
    # streams shared their experts, not a faster batch on this hardware.
    k = shipped_constants()
    speed = {
        c: predict(CalibrationRow.model_validate({**MARLIN_PAIR, "id": f"M{c}", "concurrency": c,
                                                  "tok_s": t}), k)
        for c, t in ((1, 17.0), (2, 12.1), (4, 9.1))
    }  # fmt: skip

    assert speed[4] / speed[1] == pytest.approx(9.1 / 17.0, rel=0.05)
    assert speed[2] / speed[1] == pytest.approx(12.1 / 17.0, rel=0.10)
    assert speed[4] / speed[1] < 0.8 * 28.9 / 40.4

"""`sparkrack bench`'s arithmetic, stream parsing, table, JSON, stored runs and compare."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sparkrack.ops.bench.measure import (
    BenchResult,
    BenchSettings,
    LevelResult,
    Prediction,
    RequestSample,
    level_result,
    prompt_of,
    run_bench,
)
from sparkrack.ops.bench.openai_stream import EndpointError, StreamTiming, events, timed_events
from sparkrack.ops.bench.report import render_bench
from sparkrack.ops.bench.store import StoreError, latest, load, save

pytestmark = pytest.mark.unit

SETTINGS = BenchSettings(
    stack="sim-2",
    endpoint="http://198.18.0.11:8000",
    model="minimax-m2.7-awq",
    prompt_tokens=32,
    max_tokens=5,
    repetitions=3,
    warmups=1,
    concurrency=(1, 2),
)


def chunk(text: str) -> dict[str, Any]:
    return {"choices": [{"index": 0, "text": text}]}


def ticking(times: list[float]) -> Iterator[float]:
    yield from times


def test_decode_rate_is_one_over_tpot_and_excludes_the_first_token() -> None:
    # Sent at 0, first token at 0.5 s (prefill), then one every 25 ms: 40 tok/s decode.
    clock = iter([0.5, 0.525, 0.55, 0.575, 0.6, 0.6, 0.6])
    payloads = [chunk("a"), chunk(" b"), chunk(" c"), chunk(" d"), chunk(" e")]
    payloads.append({"choices": [], "usage": {"prompt_tokens": 32, "completion_tokens": 5}})

    timing = timed_events(0.0, iter(payloads), lambda: next(clock))

    assert timing.decode_tok_s == pytest.approx(40.0)
    assert timing.ttft_s == pytest.approx(0.5)
    assert timing.end_to_end_tok_s == pytest.approx(5 / 0.6)
    assert timing.prompt_tokens == 32


def test_usage_counts_tokens_when_a_chunk_carries_several() -> None:
    clock = iter([1.0, 1.1, 1.1, 1.1])
    payloads = [chunk("a b"), chunk(" c d"), {"choices": [], "usage": {"completion_tokens": 4}}]

    timing = timed_events(0.9, iter(payloads), lambda: next(clock))

    # 3 intervals over 0.1 s, not 1 interval: 30 tok/s.
    assert timing.decode_tok_s == pytest.approx(30.0)


def test_one_token_has_no_decode_rate() -> None:
    timing = StreamTiming(0.0, (0.1,), 0.1, completion_tokens=1, prompt_tokens=3)

    assert timing.decode_tok_s is None


class FakeResponse:
    def __init__(self, lines: list[bytes]) -> None:
        self.lines = lines

    def __iter__(self) -> Iterator[bytes]:
        return iter(self.lines)


def test_events_reads_data_lines_until_done() -> None:
    answer = FakeResponse([b'data: {"x": 1}\n', b"\n", b": keep-alive\n", b"data: [DONE]\n"])

    assert list(events(answer)) == [{"x": 1}]  # type: ignore[arg-type]


def test_a_stream_without_done_is_an_error() -> None:
    answer = FakeResponse([b'data: {"x": 1}\n'])

    with pytest.raises(EndpointError, match="without `data: \\[DONE\\]`"):
        list(events(answer))  # type: ignore[arg-type]


def test_prompt_has_the_asked_number_of_words() -> None:
    assert len(prompt_of(700).split()) == 700


def fixed_timing(rate: float, tokens: int = 5, ttft: float = 0.05) -> StreamTiming:
    times = tuple(ttft + i / rate for i in range(tokens))
    return StreamTiming(0.0, times, times[-1], completion_tokens=tokens, prompt_tokens=32)


def test_run_bench_keeps_the_cold_run_apart() -> None:
    rates = iter([17.0, 40.0, 41.0, 39.0, 40.0, 40.0, 40.0])
    lines: list[str] = []

    result = run_bench(
        SETTINGS, Prediction(ceiling_tok_s=86.4, expected_tok_s=40.0),
        lambda: fixed_timing(next(rates)), lines.append,
    )  # fmt: skip

    assert [s.decode_tok_s for s in result.cold] == [pytest.approx(17.0)]
    assert result.decode().min == pytest.approx(39.0)
    assert result.decode().median == pytest.approx(40.0)
    assert result.decode().max == pytest.approx(41.0)
    assert [level.streams for level in result.levels] == [1, 2]
    assert lines[0].startswith("warm-up (cold, not counted) 1/1: decode 17.0 tok/s")


def test_level_aggregates_tokens_over_the_wall_time() -> None:
    level = level_result(4, [fixed_timing(40.0, tokens=100)] * 4, wall_s=3.47)

    assert level.aggregate_tok_s == pytest.approx(400 / 3.47)
    assert level.per_stream_decode_tok_s == pytest.approx(40.0)


def sample(decode: float) -> RequestSample:
    return RequestSample(
        decode_tok_s=decode,
        end_to_end_tok_s=decode * 0.95,
        ttft_s=0.052,
        completion_tokens=64,
        prompt_tokens=32,
    )


def result_of(decodes: list[float], peak: float, started: str) -> BenchResult:
    levels = (
        LevelResult(
            streams=1, wall_s=1.6, tokens=64, aggregate_tok_s=decodes[0] * 0.98,
            per_stream_decode_tok_s=decodes[0], per_stream_end_to_end_tok_s=decodes[0] * 0.95,
            ttft_median_s=0.052,
        ),
        LevelResult(
            streams=4, wall_s=1.7, tokens=256, aggregate_tok_s=peak,
            per_stream_decode_tok_s=decodes[0], per_stream_end_to_end_tok_s=decodes[0] * 0.9,
            ttft_median_s=0.06,
        ),
    )  # fmt: skip
    return BenchResult(
        started_utc=started,
        settings=SETTINGS,
        cold=(sample(17.0),),
        single=tuple(sample(d) for d in decodes),
        levels=levels,
        prediction=Prediction(ceiling_tok_s=86.4, expected_tok_s=40.0),
    )


SEED_001 = result_of([40.4, 40.2, 40.6], 115.6, "2026-12-02T10:00:00Z")
EARLIER = result_of([25.0, 19.0, 28.0], 60.0, "2026-12-01T10:00:00Z")

GOLDEN_TABLE = """\
sparkrack bench: stack sim-2, minimax-m2.7-awq at http://198.18.0.11:8000 (2026-12-02T10:00:00Z)
  prompt ~32 tokens, 5 generated, 3 repetitions after 1 warm-up

  cold (not counted)  decode tok/s  end-to-end tok/s  TTFT
  warm-up 1           17.0          16.1              52 ms

  single stream, warm    min    median  max
  decode tok/s (1/TPOT)  40.2   40.4    40.6
  end-to-end tok/s       38.2   38.4    38.6
  TTFT                   52 ms  52 ms   52 ms

  estimate (sparkrack estimate)  predicted  measured  measured/pred
  ceiling (bandwidth bound)      86.4       40.4      0.47
  expected                       40.0       40.4      1.01

  streams  aggregate tok/s  per-stream decode  per-stream e2e  TTFT   scale
  1        39.6             40.4               38.4            52 ms  x1.00
  4        115.6            40.4               36.4            60 ms  x2.92

  since 2026-12-01T10:00:00Z      then  now    change
  single-stream decode tok/s      25.0  40.4   +61.6%
  single-stream end-to-end tok/s  23.8  38.4   +61.6%
  peak aggregate tok/s            60.0  115.6  +92.7%"""


def test_table_golden_with_prediction_and_comparison() -> None:
    assert render_bench(SEED_001, EARLIER) == GOLDEN_TABLE


def test_json_round_trips_through_the_store(tmp_path: Path) -> None:
    save(EARLIER, tmp_path)
    path = save(SEED_001, tmp_path)

    assert path.name == "2026-12-02T10-00-00Z.json"
    assert json.loads(path.read_text())["single"][0]["decode_tok_s"] == 40.4
    assert load(path) == SEED_001
    assert latest(tmp_path, "sim-2") == SEED_001
    assert latest(tmp_path, "gb10-2") is None


def test_a_foreign_json_in_the_store_is_named(tmp_path: Path) -> None:
    (tmp_path / "notes.json").write_text("{}")

    with pytest.raises(StoreError, match=r"notes\.json: not a sparkrack bench result"):
        latest(tmp_path, "sim-2")


def test_plot_is_a_png(tmp_path: Path) -> None:
    from sparkrack.ops.bench.plot import write_plot

    path = write_plot(SEED_001, tmp_path / "run.png")

    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

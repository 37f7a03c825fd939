"""`sparkrack bench`: measure the deployed endpoint the way seed 001 did, warm.

Cold first: the first requests after a load ran at 17 tok/s against 40.4 steady (seed 001), so
they are run, kept apart as `cold`, and never mixed into the steady figures. Then one stream N
times, then a sweep of concurrent streams: concurrency, not single-stream speed, pays for the
hardware (4 agents aggregated 115.6 tok/s).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime

from sparkrack.estimate.decode import DecodeInputs
from sparkrack.ops.bench.openai_stream import Endpoint, StreamTiming, stream_completion
from sparkrack.plan.perf import PerfEstimate
from sparkrack.stackspec import StrictModel

Progress = Callable[[str], None]
# Ordinary words: about one token each for the usual tokenizers (the stand-in counts words).
PROMPT_TEXT = (
    "the rack serves a model across two boxes and every token crosses the fabric once per layer "
    "so the cable map the memory bandwidth and the transport decide how fast it goes"
)


class BenchSettings(StrictModel):
    stack: str
    endpoint: str
    model: str
    prompt_tokens: int
    max_tokens: int
    repetitions: int
    warmups: int
    concurrency: tuple[int, ...]


class RequestSample(StrictModel):
    """One request's figures; decode is None when fewer than two tokens came back."""

    decode_tok_s: float | None
    end_to_end_tok_s: float
    ttft_s: float
    completion_tokens: int
    prompt_tokens: int

    @classmethod
    def of(cls, timing: StreamTiming) -> RequestSample:
        return cls(
            decode_tok_s=timing.decode_tok_s,
            end_to_end_tok_s=timing.end_to_end_tok_s,
            ttft_s=timing.ttft_s,
            completion_tokens=timing.completion_tokens,
            prompt_tokens=timing.prompt_tokens,
        )


class Spread(StrictModel):
    min: float
    median: float
    max: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread:
        return cls(min=min(values), median=statistics.median(values), max=max(values))


class LevelResult(StrictModel):
    """`streams` requests sent together: aggregate tokens over the wall time of the slowest."""

    streams: int
    wall_s: float
    tokens: int
    aggregate_tok_s: float
    per_stream_decode_tok_s: float  # median over the streams
    per_stream_end_to_end_tok_s: float
    ttft_median_s: float


class Prediction(StrictModel):
    """`sparkrack estimate`'s single-stream decode figures, to set beside the measurement, and
    what the decode model was given, so that the run can become a calibration row of the rack.
    (Results stored before the range and inputs were kept load with them unset.)"""

    ceiling_tok_s: float
    expected_tok_s: float
    low_tok_s: float | None = None
    high_tok_s: float | None = None
    active_params: float | None = None
    inputs: DecodeInputs | None = None

    @classmethod
    def of(cls, perf: PerfEstimate) -> Prediction:
        return cls(
            ceiling_tok_s=perf.decode_tok_s_ceiling,
            expected_tok_s=perf.decode_tok_s_expected,
            low_tok_s=perf.decode_tok_s_low,
            high_tok_s=perf.decode_tok_s_high,
            active_params=perf.active_params,
            inputs=perf.inputs,
        )


class BenchResult(StrictModel):
    started_utc: str
    settings: BenchSettings
    cold: tuple[RequestSample, ...]
    single: tuple[RequestSample, ...]
    levels: tuple[LevelResult, ...]
    prediction: Prediction

    def decode(self) -> Spread:
        return Spread.of([s.decode_tok_s for s in self.single if s.decode_tok_s is not None])

    def end_to_end(self) -> Spread:
        return Spread.of([s.end_to_end_tok_s for s in self.single])

    def ttft(self) -> Spread:
        return Spread.of([s.ttft_s for s in self.single])

    def peak_aggregate_tok_s(self) -> float:
        return max((level.aggregate_tok_s for level in self.levels), default=0.0)


def prompt_of(tokens: int) -> str:
    words = PROMPT_TEXT.split()
    return " ".join(words[i % len(words)] for i in range(tokens))


Request = Callable[[], StreamTiming]


def request_for(endpoint: Endpoint, settings: BenchSettings) -> Request:
    prompt = prompt_of(settings.prompt_tokens)
    return lambda: stream_completion(endpoint, settings.model, prompt, settings.max_tokens)


def run_bench(
    settings: BenchSettings, prediction: Prediction, request: Request, progress: Progress
) -> BenchResult:
    started = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    cold = samples("warm-up (cold, not counted)", settings.warmups, request, progress)
    single = samples("single stream", settings.repetitions, request, progress)
    levels = tuple(level(n, request, progress) for n in settings.concurrency)
    return BenchResult(
        started_utc=started,
        settings=settings,
        cold=cold,
        single=single,
        levels=levels,
        prediction=prediction,
    )


def samples(
    what: str, count: int, request: Request, progress: Progress
) -> tuple[RequestSample, ...]:
    taken = []
    for index in range(count):
        sample = RequestSample.of(request())
        taken.append(sample)
        progress(f"{what} {index + 1}/{count}: {describe(sample)}")
    return tuple(taken)


def describe(sample: RequestSample) -> str:
    decode = f"{sample.decode_tok_s:.1f}" if sample.decode_tok_s is not None else "-"
    return (
        f"decode {decode} tok/s, end-to-end {sample.end_to_end_tok_s:.1f} tok/s,"
        f" TTFT {sample.ttft_s * 1000:.0f} ms"
    )


def level(streams: int, request: Request, progress: Progress) -> LevelResult:
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=streams) as pool:
        timings = list(pool.map(lambda _: request(), range(streams)))
    result = level_result(streams, timings, time.monotonic() - started)
    progress(
        f"{streams} concurrent: {result.aggregate_tok_s:.1f} tok/s aggregate,"
        f" {result.per_stream_decode_tok_s:.1f} tok/s per stream"
    )
    return result


def level_result(streams: int, timings: Sequence[StreamTiming], wall_s: float) -> LevelResult:
    tokens = sum(t.completion_tokens for t in timings)
    decodes = [t.decode_tok_s for t in timings if t.decode_tok_s is not None]
    return LevelResult(
        streams=streams,
        wall_s=wall_s,
        tokens=tokens,
        aggregate_tok_s=tokens / wall_s,
        per_stream_decode_tok_s=statistics.median(decodes) if decodes else 0.0,
        per_stream_end_to_end_tok_s=statistics.median(t.end_to_end_tok_s for t in timings),
        ttft_median_s=statistics.median(t.ttft_s for t in timings),
    )

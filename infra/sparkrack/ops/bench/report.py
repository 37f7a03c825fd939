"""`sparkrack bench` as a table for people, with the estimate and the previous run beside it."""

from __future__ import annotations

from collections.abc import Callable

from sparkrack.ops.bench.measure import BenchResult, RequestSample, Spread
from sparkrack.text.table import table


def render_bench(result: BenchResult, previous: BenchResult | None = None) -> str:
    settings = result.settings
    title = (
        f"sparkrack bench: stack {settings.stack}, {settings.model} at {settings.endpoint}"
        f" ({result.started_utc})"
    )
    shape = (
        f"  prompt ~{settings.prompt_tokens} tokens, {settings.max_tokens} generated,"
        f" {settings.repetitions} repetitions after {settings.warmups} warm-up"
    )
    sections = [
        [title, shape],
        _cold(result.cold),
        _single(result),
        _prediction(result),
        _levels(result),
        _comparison(result, previous) if previous else [],
    ]
    return "\n\n".join("\n".join(lines) for lines in sections if lines)


def _cold(cold: tuple[RequestSample, ...]) -> list[str]:
    if not cold:
        return []
    rows = [
        (f"warm-up {i + 1}", _tok_s(s.decode_tok_s), _tok_s(s.end_to_end_tok_s), _ms(s.ttft_s))
        for i, s in enumerate(cold)
    ]
    headers = ("cold (not counted)", "decode tok/s", "end-to-end tok/s", "TTFT")
    return table(rows, headers)


def _single(result: BenchResult) -> list[str]:
    rows = [
        ("decode tok/s (1/TPOT)", *_spread(result.decode(), _tok_s)),
        ("end-to-end tok/s", *_spread(result.end_to_end(), _tok_s)),
        ("TTFT", *_spread(result.ttft(), _ms)),
    ]
    return table(rows, ("single stream, warm", "min", "median", "max"))


def _prediction(result: BenchResult) -> list[str]:
    measured = result.decode().median
    predicted = result.prediction
    rows = [
        (
            "ceiling (bandwidth bound)",
            _tok_s(predicted.ceiling_tok_s),
            _tok_s(measured),
            _ratio(measured, predicted.ceiling_tok_s),
        ),
        (
            "expected",
            _tok_s(predicted.expected_tok_s),
            _tok_s(measured),
            _ratio(measured, predicted.expected_tok_s),
        ),
    ]
    if predicted.low_tok_s is not None and predicted.high_tok_s is not None:
        inside = predicted.low_tok_s <= measured <= predicted.high_tok_s
        rows.append(
            (
                "range (the fit's error)",
                f"{predicted.low_tok_s:.1f}-{predicted.high_tok_s:.1f}",
                _tok_s(measured),
                "inside" if inside else "OUTSIDE",
            )
        )
    return table(rows, ("estimate (sparkrack estimate)", "predicted", "measured", "measured/pred"))


def _levels(result: BenchResult) -> list[str]:
    single = result.levels[0].aggregate_tok_s if result.levels else 0.0
    rows = [
        (
            level.streams,
            _tok_s(level.aggregate_tok_s),
            _tok_s(level.per_stream_decode_tok_s),
            _tok_s(level.per_stream_end_to_end_tok_s),
            _ms(level.ttft_median_s),
            f"x{level.aggregate_tok_s / single:.2f}" if single else "-",
        )
        for level in result.levels
    ]
    headers = ("streams", "aggregate tok/s", "per-stream decode", "per-stream e2e", "TTFT", "scale")
    return table(rows, headers)


def _comparison(result: BenchResult, previous: BenchResult) -> list[str]:
    rows = [
        _change("single-stream decode tok/s", previous.decode().median, result.decode().median),
        _change(
            "single-stream end-to-end tok/s",
            previous.end_to_end().median,
            result.end_to_end().median,
        ),
        _change(
            "peak aggregate tok/s", previous.peak_aggregate_tok_s(), result.peak_aggregate_tok_s()
        ),
    ]
    return table(rows, (f"since {previous.started_utc}", "then", "now", "change"))


def _change(what: str, then: float, now: float) -> tuple[str, str, str, str]:
    change = f"{(now - then) / then:+.1%}" if then else "-"
    return (what, _tok_s(then), _tok_s(now), change)


def _spread(spread: Spread, show: Callable[[float], str]) -> tuple[str, str, str]:
    return (show(spread.min), show(spread.median), show(spread.max))


def _tok_s(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms"


def _ratio(measured: float, predicted: float) -> str:
    return f"{measured / predicted:.2f}" if predicted else "-"

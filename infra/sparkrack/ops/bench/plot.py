"""The PNG of tok/s against concurrency. matplotlib is imported here only, and only when a plot
is drawn, so that the rest of the CLI starts without it."""

from __future__ import annotations

from pathlib import Path

from sparkrack.ops.bench.measure import BenchResult


def write_plot(result: BenchResult, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")  # no display on a server or in CI
    import matplotlib.pyplot as plt

    streams = [level.streams for level in result.levels]
    figure, axes = plt.subplots(figsize=(7, 4.5), dpi=100)
    try:
        aggregate = [level.aggregate_tok_s for level in result.levels]
        per_stream = [level.per_stream_decode_tok_s for level in result.levels]
        axes.plot(streams, aggregate, marker="o", label="aggregate tok/s")
        axes.plot(streams, per_stream, marker="s", label="per-stream decode tok/s")
        axes.axhline(
            result.prediction.expected_tok_s,
            linestyle="--",
            color="grey",
            label=f"estimate, one stream ({result.prediction.expected_tok_s:.1f})",
        )
        axes.set_xscale("log", base=2)
        axes.set_xticks(streams, [str(n) for n in streams])
        axes.set_xlabel("concurrent streams")
        axes.set_ylabel("tokens per second")
        axes.set_ylim(bottom=0)
        settings = result.settings
        axes.set_title(f"{settings.stack}: {settings.model} ({result.started_utc})")
        axes.grid(True, alpha=0.3)
        axes.legend()
        figure.tight_layout()
        figure.savefig(path, format="png")
    finally:
        plt.close(figure)
    return path

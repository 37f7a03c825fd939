"""Bench results kept per stack and date, so that `--compare` can show what changed.

One JSON file per run, named by its UTC start time (sortable, no colons for other filesystems),
the plot and the calibration row (`sparkrack estimate --calibration`) beside it with the same
name: ~/.local/share/sparkrack/bench/<stack>/ by default.
"""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import ValidationError

from sparkrack.ops.bench.calibration import write_calibration
from sparkrack.ops.bench.measure import BenchResult


class StoreError(Exception):
    """A stored result that cannot be read back; the message names the file."""


def results_dir(stack: str, out: Path | None) -> Path:
    if out is not None:
        return out
    data_home = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data_home) / "sparkrack" / "bench" / stack


def result_stem(result: BenchResult) -> str:
    return result.started_utc.replace(":", "-")


def save(result: BenchResult, directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{result_stem(result)}.json"
    path.write_text(result.model_dump_json(indent=2) + "\n")
    write_calibration(result, directory / f"{result_stem(result)}.calibration.yaml")
    return path


def latest(directory: Path, stack: str) -> BenchResult | None:
    """The newest stored run of this stack in `directory`, or None before the first."""
    for path in sorted(directory.glob("*.json"), reverse=True):
        result = load(path)
        if result.settings.stack == stack:
            return result
    return None


def load(path: Path) -> BenchResult:
    try:
        return BenchResult.model_validate_json(path.read_text())
    except (OSError, ValidationError) as error:
        first = str(error).splitlines()[0]
        raise StoreError(f"{path}: not a sparkrack bench result ({first})") from None

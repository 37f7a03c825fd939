"""What the sim-16 benchmarks share: a private sim-16 rack around one measurement, its table."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from sparkrack.sim import cluster
from tests.e2e.sim_fixtures import shipped_rack


def bench_on_sim16(
    stack: str, prefix: str, measure: Callable[[Path], Mapping[str, Any]], argv: list[str]
) -> int:
    """sim-16's rack as `stack` on `prefix`.0/24 brought up, `measure` run in a scratch project
    directory, its rows printed as a table; the rack removed afterwards unless --keep."""
    topology = shipped_rack("sim-16", stack, prefix)
    try:
        started = time.monotonic()
        status = cluster.up(topology, print)
        print(f"sim up: {time.monotonic() - started:.1f} s, healthy: {status.healthy}", flush=True)
        if not status.healthy:
            return 1
        with tempfile.TemporaryDirectory(prefix="sparkrack-bench-") as base:
            rows = measure(Path(base))
        print("step | wall time (s)")
        for name, seconds in rows.items():
            print(f"{name} | {seconds}")
    finally:
        if "--keep" not in argv:
            cluster.down(topology, print)
    return 0

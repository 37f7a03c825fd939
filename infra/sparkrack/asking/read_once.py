"""One refresh per `pulumi up`: the update trusts what its own preview read (docs/speed.md,
"One refresh per up").

When the preview's read of a resource found the node as its stored props say, that is recorded
here; the update's read of the same resource with the same props, in the same engine process,
returns them without asking the node. A resource found drifted, or not read, is read again;
another engine process finds no record. The record is a file per engine process under
~/.cache/sparkrack/refresh/runs: a line per resource, a digest of its id and props (the values a
provider declares secret left out). Files of ended engine processes are removed when a new one
starts. With the switch off (config.speedups) nothing is recorded or trusted.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparkrack.config.cache import cache_root
from sparkrack.config.speedups import speedups_on


@dataclass
class Run:
    """This process's engine run: its record file (None without an engine) and its lines."""

    path: Path | None
    confirmed: set[str] = field(default_factory=set)
    started: bool = False  # the directory swept, and this process may append


_lock = threading.Lock()
_run: Run | None = None  # found once per process: its engine does not change


def directory() -> Path:
    return cache_root() / "refresh" / "runs"


def process_start(pid: int) -> str | None:
    """A process's start time in clock ticks since boot (/proc/PID/stat's 22nd field): with its
    pid, an identity no later process shares. None when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]  # the fields after the command's ")" start at 3


def engine_run() -> str | None:
    """The engine process this provider serves (the provider host is its child), as pid-start."""
    pid = os.getppid()
    start = process_start(pid)
    return f"{pid}-{start}" if start else None


def this_run() -> Run:
    """The engine run, with what its earlier refresh recorded, read on the first call."""
    global _run
    with _lock:
        if _run is None:
            engine = engine_run()
            path = directory() / f"{engine}.tsv" if engine else None
            _run = Run(path, set(read_lines(path)) if path else set())
        return _run


def key(id_: str, props: Mapping[str, Any], secret: Iterable[str]) -> str:
    """The resource's id and props as one line's digest; the secret values are left out."""
    hidden = set(secret)
    shown = {name: value for name, value in props.items() if name not in hidden}
    text = json.dumps([id_, shown], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def confirmed(line: str) -> bool:
    """Whether this engine run read the resource of this `key`, and found it on the node."""
    return speedups_on() and line in this_run().confirmed


def confirm(line: str) -> None:
    """Record that the node holds what the `key`'s props say, for this engine run's next read."""
    run = this_run()
    if run.path is None or not speedups_on():
        return
    with _lock:
        run.confirmed.add(line)
        start_recording(run, run.path)
    try:
        with run.path.open("a") as out:  # one short append per line: lines do not mix
            out.write(line + "\n")
    except OSError:
        return  # without the record the update reads the node itself


def read_lines(path: Path) -> list[str]:
    try:
        return path.read_text().split()
    except OSError:
        return []


def start_recording(run: Run, path: Path) -> None:
    """Once per process, before its first line: the directory made private, and the records of
    engine runs that have ended removed."""
    if run.started:
        return
    run.started = True
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        for old in path.parent.glob("*.tsv"):
            if old != path and not running(old.stem):
                old.unlink(missing_ok=True)
    except OSError:
        return


def running(run: str) -> bool:
    pid, _, start = run.partition("-")
    return pid.isdigit() and process_start(int(pid)) == start


def forget_all() -> None:
    """Back to a process that has read no record (tests)."""
    global _run
    with _lock:
        _run = None

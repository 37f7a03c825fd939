"""One refresh per `pulumi up`: the update trusts what its own preview read.

`pulumi up` previews, then updates, and with `refresh: always` each of the two reads every
resource (issue 18: half of a no-op `up`). Both run under the same engine process, and nothing
writes the stack's state between them, so the update's read of a resource gets the same stored
props the preview's read got. When the preview's read found the node as those props say (no
drift), it records that here; the update's read of the same resource with the same props then
returns them as they are, without asking the node: the update does what the preview showed, as
Terraform's apply does what its plan showed. A resource the preview found drifted, or could not
read, is read again. Another engine process (a later `preview`, another `up`) finds no record and
reads the nodes itself.

The record is a file per engine process under ~/.cache/sparkrack/refresh/runs: one line per
resource, its id and a digest of its props (without the values a provider declares secret: no
secret leaves the engine's state, not even as a hash). Files of engine processes that have ended
are removed when a new one starts.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from sparkrack.cache import cache_root

_lock = threading.RLock()
_confirmed: set[str] | None = None  # this engine run's records, loaded once per process
_started = False  # this process has swept the directory and may append


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


def record_path() -> Path | None:
    run = engine_run()
    return directory() / f"{run}.tsv" if run else None


def digest(id_: str, props: Mapping[str, Any], secret: Iterable[str]) -> str:
    """The resource's id and props as one line's key; the secret values are left out."""
    hidden = set(secret)
    shown = {key: value for key, value in props.items() if key not in hidden}
    text = json.dumps([id_, shown], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def confirmed(id_: str, props: Mapping[str, Any], secret: Iterable[str]) -> bool:
    """Whether this engine run read this resource, with these props, and found them on the node."""
    return digest(id_, props, secret) in records()


def confirm(id_: str, props: Mapping[str, Any], secret: Iterable[str]) -> None:
    """Record that the node holds what these props say, for this engine run's next read."""
    path = record_path()
    if path is None:
        return
    line = digest(id_, props, secret)
    with _lock:
        records().add(line)
        start_recording(path)
    try:
        with path.open("a") as out:  # one short append per line: lines from threads do not mix
            out.write(line + "\n")
    except OSError:
        return  # without the record the update reads the node itself


def records() -> set[str]:
    global _confirmed
    with _lock:
        if _confirmed is None:
            path = record_path()
            _confirmed = set(read_lines(path)) if path else set()
        return _confirmed


def read_lines(path: Path) -> list[str]:
    try:
        return path.read_text().split()
    except OSError:
        return []


def start_recording(path: Path) -> None:
    """Once per process, before its first line: the directory made private, and the records of
    engine runs that have ended removed."""
    global _started
    if _started:
        return
    _started = True
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
    global _confirmed, _started
    with _lock:
        _confirmed, _started = None, False

"""Running host commands for the simulator: one error type, and timed progress lines.

Every failure names what it was doing (the stack, the node, the image), so `sim up` output reads
as "stack sim-2, node spark-1: ..." rather than a bare exit status.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager

Progress = Callable[[str], None]

# Long enough for debootstrap over a slow mirror; short enough that a hang ends a CI run.
DEFAULT_TIMEOUT_S = 1800.0


class SimError(RuntimeError):
    """Something the simulator could not do; the message names the stack, node or image."""


def run(
    args: Sequence[str],
    *,
    what: str,
    check: bool = True,
    input_text: str | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = DEFAULT_TIMEOUT_S,
) -> subprocess.CompletedProcess[str]:
    """Run a host command; on failure raise SimError saying `what` failed and the stderr tail."""
    try:
        done = subprocess.run(
            list(args),
            input=input_text,
            capture_output=True,
            text=True,
            env=None if env is None else {**os.environ, **env},
            timeout=timeout,
        )
    except subprocess.TimeoutExpired as exc:
        raise SimError(f"{what}: `{' '.join(args)}` timed out after {timeout:.0f}s") from exc
    if check and done.returncode != 0:
        raise failed(what, done)
    return done


def failed(what: str, done: subprocess.CompletedProcess[str]) -> SimError:
    """The error for a host command that exited non-zero: what failed, the command, its output."""
    return SimError(f"{what}: `{' '.join(done.args)}` exited {done.returncode}: {tail(done)}")


def tail(done: subprocess.CompletedProcess[str], lines: int = 15) -> str:
    text = (done.stderr or "") + (done.stdout or "")
    return "\n".join(text.strip().splitlines()[-lines:])


@contextmanager
def timed_step(progress: Progress, label: str) -> Iterator[None]:
    """Say a step started, then how long it took (or that it failed after how long)."""
    progress(f"{label} ...")
    started = time.monotonic()
    try:
        yield
    except BaseException:
        progress(f"{label}: failed after {time.monotonic() - started:.1f}s")
        raise
    progress(f"{label}: done in {time.monotonic() - started:.1f}s")

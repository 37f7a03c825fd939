"""The simulator's own background processes (the RDMA counter updater, the switch's DHCP server):
each outlives `sim up` and is known by a PID file in the stack's directory, which only counts
while that PID still runs our command (a recycled PID is not ours). Ended by that PID only."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

STOP_TIMEOUT_S = 10.0


def owned_pid(pid_file: Path, *marks: bytes) -> int | None:
    """The PID in `pid_file` when that process is alive and its command line holds every mark."""
    try:
        pid = int(pid_file.read_text())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except (OSError, ValueError):
        return None
    return pid if all(mark in cmdline for mark in marks) else None


def stop(pid_file: Path, pid: int | None) -> bool:
    """The PID file gone and `pid` (what `owned_pid` found) ended: SIGTERM, then waited for,
    for a while. Whether there was a process to end."""
    pid_file.unlink(missing_ok=True)
    if pid is None:
        return False
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while process_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    return True


def process_alive(pid: int) -> bool:
    try:
        # Reap it if it is our own child (a test process that ran `up`), or it lingers a zombie.
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return False
    except ChildProcessError:
        pass
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"

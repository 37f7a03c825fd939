"""The simulator's background processes by PID file: ours only while the PID runs our command."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from sparkrack.sim import daemons

pytestmark = pytest.mark.unit


def test_a_pid_counts_while_it_runs_our_command_and_stop_ends_it(tmp_path: Path) -> None:
    pid_file = tmp_path / "sleeper.pid"
    sleeper = subprocess.Popen(["sleep", "60"])
    pid_file.write_text(f"{sleeper.pid}\n")
    cmdline = Path(f"/proc/{sleeper.pid}/cmdline")
    deadline = time.monotonic() + 10
    while not cmdline.read_bytes().startswith(b"sleep") and time.monotonic() < deadline:
        time.sleep(0.01)  # until the fork has exec'd `sleep`

    assert daemons.owned_pid(pid_file, b"sleep", b"60") == sleeper.pid
    assert daemons.owned_pid(pid_file, b"sleep", b"61") is None  # another command: not ours
    assert daemons.stop(pid_file, sleeper.pid)
    assert not daemons.process_alive(sleeper.pid) and not pid_file.exists()
    assert daemons.owned_pid(pid_file, b"sleep") is None
    assert not daemons.stop(pid_file, None)

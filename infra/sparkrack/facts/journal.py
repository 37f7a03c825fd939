"""Why a unit is not running: its last result (`systemctl show`) and its log's tail."""

from __future__ import annotations

import shlex

from sparkrack.facts import Fact
from sparkrack.facts.units import parse_properties, systemctl

OUTCOME = ("ActiveState", "Result", "NRestarts", "ExecMainPID")
ERROR_TAIL = 15  # lines of a unit's log that an error about the unit quotes


def unit_outcome(unit: str, user: str) -> Fact[dict[str, str]]:
    """The unit's state, result, restart count and last main PID, in the user's manager."""
    command = systemctl("user", user, "show", "-p", ",".join(OUTCOME), unit)
    return Fact(command, parse_properties, sudo=True)


def parse_tail(stdout: str) -> str:
    return stdout.strip()


def journal_tail(unit: str, main_pid: str, lines: int) -> Fact[str]:
    """The last lines logged by a user's unit, as root (`--user-unit` would match root's uid
    too). Rootless Podman moves itself into a scope of its own, so its output is matched by the
    unit's last main PID as well."""
    matches = [f"_SYSTEMD_USER_UNIT={unit}"]
    if main_pid not in ("", "0"):
        matches += ["+", f"_PID={main_pid}"]
    tail = ["journalctl", "--no-pager", "--output=cat", "-n", str(lines), *matches]
    return Fact(shlex.join(tail) + " || true", parse_tail, sudo=True)


def system_journal_tail(unit: str, lines: int) -> Fact[str]:
    """The last lines logged by a system unit (its processes and systemd's about it)."""
    tail = ["journalctl", "--no-pager", "--output=cat", "-n", str(lines), "-u", unit]
    return Fact(shlex.join(tail) + " || true", parse_tail, sudo=True)

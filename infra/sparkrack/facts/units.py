"""A systemd unit's load, active and enablement state and its main process (`systemctl show`),
system or user scope."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from sparkrack.facts import Fact
from sparkrack.text.commands import with_account

Scope = Literal["system", "user"]
SHOWN = ("LoadState", "ActiveState", "SubState", "UnitFileState")
ENABLED_STATES = ("enabled", "enabled-runtime")


@dataclass(frozen=True)
class UnitState:
    load: str
    active_state: str
    sub: str
    file_state: str

    @property
    def enabled(self) -> bool:
        return self.file_state in ENABLED_STATES

    @property
    def active(self) -> bool:
        return self.active_state == "active"


def parse_properties(stdout: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in stdout.splitlines() if "=" in line)


def parse_unit_state(stdout: str) -> UnitState:
    shown = parse_properties(stdout)
    return UnitState(
        load=shown.get("LoadState", ""),
        active_state=shown.get("ActiveState", ""),
        sub=shown.get("SubState", ""),
        file_state=shown.get("UnitFileState", ""),
    )


def systemctl(scope: Scope, user: str | None, *args: str) -> str:
    """The systemctl command line for a scope; a user scope reaches the user's manager via -M."""
    if scope == "user":
        if not user:
            raise ValueError("a user-scope unit needs its user")
        return shlex.join(["systemctl", "--user", "-M", f"{user}@", *args])
    return shlex.join(["systemctl", *args])


def unit_state(unit: str, scope: Scope = "system", user: str | None = None) -> Fact[UnitState]:
    command = systemctl(scope, user, "show", "-p", ",".join(SHOWN), "--", unit)
    if scope == "user" and user:
        command = with_account(user, command)  # a re-imaged node: its units went with it
    return Fact(command, parse_unit_state, sudo=scope == "user")


def parse_main_pid(stdout: str) -> int:
    """The unit's MainPID; 0 when it runs no process (stopped, or no such unit)."""
    return int(parse_properties(stdout).get("MainPID", "0") or 0)


def main_pid(unit: str, scope: Scope = "system", user: str | None = None) -> Fact[int]:
    # systemctl shows MainPID=0 for a unit it does not know: absence, not a failure.
    command = systemctl(scope, user, "show", "-p", "MainPID", "--", unit)
    return Fact(command, parse_main_pid, sudo=scope == "user")


@dataclass(frozen=True)
class ConfigAge:
    """When a unit last became active, and the newest modification time of the files it reads
    only when it starts (epoch seconds; None when it never started, or no file exists)."""

    started: float | None
    newest_config: float | None

    @property
    def stale(self) -> bool:
        """A file changed after the unit started: what runs is not what the files say."""
        if self.started is None or self.newest_config is None:
            return False
        return self.newest_config > self.started


SYSTEMD_US_UTC = "%a %Y-%m-%d %H:%M:%S.%f %Z"  # `--timestamp=us+utc`: Sun 2026-12-06 12:00:00.5 UTC


def parse_config_age(stdout: str) -> ConfigAge:
    lines = stdout.splitlines()
    started = parse_properties(lines[0] if lines else "").get("ActiveEnterTimestamp", "")
    mtimes = [float(line.split(" ", 1)[0]) for line in lines[1:] if line.strip()]
    return ConfigAge(
        started=parse_us_utc(started) if started and started != "n/a" else None,
        newest_config=max(mtimes) if mtimes else None,
    )


def parse_us_utc(text: str) -> float:
    stamp = datetime.strptime(text.replace(" UTC", " +0000"), SYSTEMD_US_UTC.replace("%Z", "%z"))
    return stamp.timestamp()


def config_age(unit: str, paths: tuple[str, ...]) -> Fact[ConfigAge]:
    """A system unit's activation time and its start-time config files' newest mtime (stat's
    `%.9Y`, nanoseconds); files that do not exist are left out."""
    show = systemctl("system", None, "show", "-p", "ActiveEnterTimestamp", "--timestamp=us+utc")
    stat = shlex.join(["stat", "-c", "%.9Y %n", "--", *paths])
    return Fact(f"{show} -- {shlex.quote(unit)}; {stat} 2>/dev/null || true", parse_config_age)

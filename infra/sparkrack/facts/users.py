"""The service user: account (`getent passwd`), linger (`loginctl`), subordinate ids, memlock."""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from sparkrack.facts import Fact
from sparkrack.facts.units import parse_properties


@dataclass(frozen=True)
class Account:
    name: str
    uid: int
    gid: int
    home: str
    shell: str


def parse_passwd(stdout: str) -> Account | None:
    line = stdout.strip()
    if not line:
        return None
    name, _, uid, gid, _, home, shell = line.split(":")
    return Account(name, int(uid), int(gid), home, shell)


def account(user: str) -> Fact[Account | None]:
    # getent exits 2 for an unknown name: that is an answer, not a failure.
    return Fact(f"getent passwd {shlex.quote(user)} || true", parse_passwd)


def parse_linger(stdout: str) -> bool:
    return parse_properties(stdout).get("Linger") == "yes"


def linger(user: str) -> Fact[bool]:
    # loginctl knows only users with a session or linger; for any other user, linger is off.
    quoted = shlex.quote(user)
    return Fact(
        f"loginctl show-user -p Linger -- {quoted} 2>/dev/null || echo Linger=no", parse_linger
    )


def parse_subids(stdout: str) -> dict[str, tuple[str, ...]]:
    """/etc/subuid or /etc/subgid: user -> its ranges as 'start:count', in file order."""
    ranges: dict[str, tuple[str, ...]] = {}
    for line in stdout.splitlines():
        fields = line.strip().split(":")
        if len(fields) == 3 and not line.startswith("#"):
            ranges[fields[0]] = (*ranges.get(fields[0], ()), f"{fields[1]}:{fields[2]}")
    return ranges


def subids(kind: str) -> Fact[dict[str, tuple[str, ...]]]:
    if kind not in ("subuid", "subgid"):
        raise ValueError(f"no such file /etc/{kind}")
    return Fact(f"cat /etc/{kind} 2>/dev/null || true", parse_subids)


def parse_memlock(stdout: str) -> str:
    """'infinity' or a byte count, as systemd prints LimitMEMLOCK."""
    return parse_properties(stdout).get("LimitMEMLOCK", "")


def user_manager_memlock(uid: int) -> Fact[str]:
    """The memlock limit the user's systemd manager (and so its rootless containers) gets."""
    return Fact(
        shlex.join(["systemctl", "show", "-p", "LimitMEMLOCK", f"user@{uid}.service"]),
        parse_memlock,
    )

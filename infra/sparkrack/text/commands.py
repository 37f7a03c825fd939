"""The form a command takes to run as another user: pure text, so a fact builds it without a
transport and a resource runs it through one."""

from __future__ import annotations

import shlex


def as_user(user: str, script: str) -> str:
    """A shell script run by `user` in its home, with its runtime dir (rootless Podman wants it)."""
    setup = 'export XDG_RUNTIME_DIR=/run/user/$(id -u); cd "$HOME"; '
    return shlex.join(["sudo", "-n", "-u", user, "-H", "sh", "-c", setup + script])


# How a command says the account it acts as does not exist: sudo's own words ("sudo: unknown user
# NAME"), and `with_account`'s, so the transport can tell a missing account from a failure.
UNKNOWN_USER = ": unknown user "


def with_account(user: str, command: str) -> str:
    """`command`, after saying so in UNKNOWN_USER's words when `user` has no account: systemctl's
    `-M user@` says only "Transport endpoint is not connected" then, as for a stopped manager."""
    said = shlex.quote(f"sparkrack{UNKNOWN_USER}{user}")
    check = f"id -u -- {shlex.quote(user)} >/dev/null 2>&1"
    return f"{check} || {{ echo {said} >&2; exit 1; }}; {command}"

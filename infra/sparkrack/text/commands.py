"""The form a command takes to run as another user: pure text, so a fact builds it without a
transport and a resource runs it through one."""

from __future__ import annotations

import shlex
from collections.abc import Sequence


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


def by_user_manager(argv: Sequence[str]) -> str:
    """`argv` started by the calling user's systemd manager, which passes on its output and exit
    status: with the manager's limits, not the calling session's."""
    return shlex.join(
        ["systemd-run", "--user", "--pipe", "--wait", "--quiet", "--collect", "--", *argv]
    )


def podman_exec(container: str, argv: Sequence[str]) -> str:
    """`podman exec CONTAINER ARGV...`, by the user's manager. The runtime sets the container's
    memlock limit on the process it starts, and a rootless runtime cannot raise its caller's hard
    limit: an SSH session has the node's default (8 MiB on DGX OS) while the manager, and the
    containers it started, have the planned limit (unlimited on a GB10), so an exec from the
    session is refused ("error setting rlimit type 8: operation not permitted";
    containers/podman#19319). So is a health check run from the session (`podman healthcheck
    run` execs its command)."""
    return by_user_manager(["podman", "exec", container, *argv])

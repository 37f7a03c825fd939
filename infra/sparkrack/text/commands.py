"""The form a command takes to run as another user: pure text, so a fact builds it without a
transport and a resource runs it through one."""

from __future__ import annotations

import shlex


def as_user(user: str, script: str) -> str:
    """A shell script run by `user` in its home, with its runtime dir (rootless Podman wants it)."""
    setup = 'export XDG_RUNTIME_DIR=/run/user/$(id -u); cd "$HOME"; '
    return shlex.join(["sudo", "-n", "-u", user, "-H", "sh", "-c", setup + script])

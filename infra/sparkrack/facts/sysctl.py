"""A kernel parameter's live value (`sysctl -n`)."""

from __future__ import annotations

import shlex

from sparkrack.facts import Fact


def normalize_value(value: str) -> str:
    """`sysctl -n` separates multi-valued parameters with tabs; declare them with spaces."""
    return " ".join(value.split())


def sysctl_value(key: str) -> Fact[str]:
    # sysctl is in /usr/sbin, missing from a plain user's PATH on Debian; sudo's secure_path has it.
    return Fact(f"sysctl -n {shlex.quote(key)}", normalize_value, sudo=True)

"""The settings of a /etc/default file: the KEY=value lines its service's script sources."""

from __future__ import annotations

import shlex

from sparkrack.facts import Fact


def parse_assignments(stdout: str) -> dict[str, str]:
    """KEY=value lines, quotes removed, comments skipped; an absent file assigns nothing."""
    values = {}
    for line in stdout.splitlines():
        key, sep, value = line.strip().partition("=")
        if sep and not key.startswith("#"):
            values[key.strip()] = value.strip().strip("\"'")
    return values


def assignments(path: str) -> Fact[dict[str, str]]:
    # The service's script reads the file only when it is there: a missing one is no settings.
    return Fact(f"cat -- {shlex.quote(path)} 2>/dev/null || true", parse_assignments)

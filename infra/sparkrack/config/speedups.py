"""The one switch of sparkrack's speed-ups (docs/speed.md): answer sharing, asking ahead in a
batch, the learned questions, the update's trust in its preview's reads, and the program's SDK
patches. On unless SPARKRACK_SPEEDUPS is `off`: then every read asks its node one fact with one
command and the SDK runs as shipped, which is slower and as correct."""

from __future__ import annotations

import os

VARIABLE = "SPARKRACK_SPEEDUPS"
OFF = frozenset({"off", "0", "false", "no"})


def speedups_on() -> bool:
    """Read each call: a test or a debugging session may turn it off in the process."""
    return os.environ.get(VARIABLE, "on").strip().lower() not in OFF

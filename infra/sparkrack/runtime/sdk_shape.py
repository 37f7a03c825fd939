"""The guard of each patch to the Pulumi SDK's private internals: a patch checks that what it
replaces has the shape it was written for (pulumi 3.272), and an SDK that differs keeps its own
code, said in one warning line, rather than a program broken at import."""

from __future__ import annotations

import sys
from importlib import metadata

WRITTEN_FOR = "3.272"


def installed_pulumi() -> str:
    try:
        return metadata.version("pulumi")
    except metadata.PackageNotFoundError:
        return "unknown"


def skipped(patch: str, problem: str | None) -> bool:
    """Whether `patch` must be skipped: `problem` names what differs, and is warned of once."""
    if problem is None:
        return False
    print(
        f"warning: sparkrack leaves the Pulumi SDK's {patch} as it is: {problem} (pulumi "
        f"{installed_pulumi()}; the patch was written for {WRITTEN_FOR})",
        file=sys.stderr,
        flush=True,
    )
    return True

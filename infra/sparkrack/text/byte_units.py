"""Byte counts for people: decimal units (GB, TB) like model sizes, binary (GiB) like memory."""

from __future__ import annotations

GB = 10**9
GIB = 2**30


def decimal_bytes(count: float) -> str:
    """1_560_000_000_000 -> '1.56 TB'; 2_652_173_913 -> '2.65 GB'."""
    for unit, size in (("TB", 10**12), ("GB", GB), ("MB", 10**6), ("kB", 10**3)):
        if abs(count) >= size:
            return (
                f"{count / size:.3g} {unit}"
                if abs(count) < 100 * size
                else f"{count / size:.0f} {unit}"
            )
    return f"{count:.0f} B"


def gib(count: float) -> str:
    return f"{count / GIB:.1f} GiB"

"""Aligned text columns for people: the one table every report and command prints."""

from __future__ import annotations

from collections.abc import Sequence


def table(rows: Sequence[Sequence[object]], headers: Sequence[str] = ()) -> list[str]:
    """Aligned columns, indented under a section title; a header line only with headers."""
    cells = [[str(c) for c in row] for row in [*([headers] if headers else []), *rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(cells[0]))]
    return [
        "  " + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
        for row in cells
    ]

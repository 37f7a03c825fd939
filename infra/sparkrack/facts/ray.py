"""Ray's own view of its cluster: `ray status`, read inside a Ray container."""

from __future__ import annotations

import re


def ray_active_nodes(status: str) -> int:
    """Sum of the counts under `Active:` in `ray status`."""
    count, active = 0, False
    for line in status.splitlines():
        text = line.strip()
        if text.endswith(":"):
            active = text == "Active:"
        elif active and (found := re.match(r"(\d+) node_", text)):
            count += int(found.group(1))
    return count

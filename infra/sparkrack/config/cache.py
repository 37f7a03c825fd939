"""Where sparkrack keeps what it can rebuild: images, build dirs, cluster keys, refresh lists."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """~/.cache/sparkrack (or under $XDG_CACHE_HOME), read each call so tests can point it away."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "sparkrack"

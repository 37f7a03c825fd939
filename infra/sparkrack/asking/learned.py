"""The questions each node was asked in its last refresh, so that the next refresh asks them all
in one round trip (asking.batch; docs/speed.md, "Asking ahead").

Learnt rather than declared: a resource's later questions follow from its earlier answers (a
container's process id, then that process's limits). A list of command lines, never an answer;
it only decides what is asked ahead. Kept per node under ~/.cache/sparkrack/refresh.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path

from sparkrack.asking.batch import Question
from sparkrack.config.cache import cache_root
from sparkrack.transport.target import Target


def directory() -> Path:
    return cache_root() / "refresh"


def path_for(target: Target) -> Path:
    """One file per node and way in: two stacks may both name a node spark-01."""
    where = f"{target.user}@{target.host}:{target.port}"
    return directory() / f"{target.node}-{hashlib.sha256(where.encode()).hexdigest()[:12]}.json"


def load(target: Target) -> list[Question]:
    """What the node was asked last time; nothing when that is not known or not readable."""
    try:
        rows = json.loads(path_for(target).read_text())
        return [Question(str(row["command"]), bool(row["sudo"])) for row in rows]
    except (OSError, ValueError, TypeError, KeyError):
        return []


def save(target: Target, questions: Sequence[Question]) -> None:
    """Replace the node's list whole (a reader never sees half of one); a cache that cannot be
    written only makes the next refresh ask one by one."""
    path = path_for(target)
    rows = [{"command": q.command, "sudo": q.sudo} for q in questions]
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        part = path.with_name(f"{path.name}.{os.getpid()}.part")
        part.write_text(json.dumps(rows, indent=0))
        part.replace(path)
    except OSError:
        return

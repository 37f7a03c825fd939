"""The catalogue: known hardware and models, shipped as YAML data beside this module.

Raw dicts come out; `load.py` merges them with the stack's own entries and `spec.py` validates
the result, so a catalogue entry is checked exactly like one a user writes.
"""

from __future__ import annotations

import copy
from functools import cache
from importlib import resources
from typing import Any, Literal

import yaml

Kind = Literal["hardware", "models"]


@cache
def _entries(kind: Kind) -> dict[str, dict[str, Any]]:
    folder = resources.files(__package__).joinpath(kind)
    entries: dict[str, dict[str, Any]] = {}
    for item in folder.iterdir():
        if item.name.endswith(".yaml"):
            entries[item.name.removesuffix(".yaml")] = yaml.safe_load(item.read_text())
    return entries


def names(kind: Kind) -> list[str]:
    return sorted(_entries(kind))


def entry(kind: Kind, name: str) -> dict[str, Any] | None:
    """A fresh copy of one entry (callers merge into it), or None when there is none."""
    found = _entries(kind).get(name)
    return copy.deepcopy(found) if found is not None else None

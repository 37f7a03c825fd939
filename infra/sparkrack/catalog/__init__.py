"""The catalogue: known hardware and models, shipped as YAML data beside this module.

Raw dicts come out; `config/load.py` merges them with the stack's own entries and `stackspec/`
validates the result, so a catalogue entry is checked exactly like one a user writes. An entry
(the catalogue's or a user's) may start from another with `base: <name>` and override some fields.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from functools import cache
from importlib import resources
from typing import Any, Literal

from sparkrack.config.yamlload import load_yaml

Kind = Literal["hardware", "models"]


@cache
def _entries(kind: Kind) -> dict[str, dict[str, Any]]:
    folder = resources.files(__package__).joinpath(kind)
    entries: dict[str, dict[str, Any]] = {}
    for item in folder.iterdir():
        if item.name.endswith(".yaml"):
            entries[item.name.removesuffix(".yaml")] = load_yaml(item.read_text())
    return entries


def data(name: str) -> Any:
    """A data file of the catalogue beside the entries (e.g. decode_model.yaml), parsed."""
    return load_yaml(resources.files(__package__).joinpath(name).read_text())


def data_path(name: str) -> str:
    """Where a catalogue data file lives, for the fit script that rewrites it."""
    return str(resources.files(__package__).joinpath(name))


def names(kind: Kind) -> list[str]:
    return sorted(_entries(kind))


def entry(kind: Kind, name: str) -> dict[str, Any] | None:
    """A fresh copy of one entry, its `base` resolved, or None when there is none."""
    found = _entries(kind).get(name)
    if found is None:
        return None
    if "base" not in found:
        return copy.deepcopy(found)
    base = entry(kind, found["base"])
    if base is None:
        raise LookupError(f"catalogue {kind} {name}: unknown base {found['base']!r}")
    return merged(base, {k: v for k, v in found.items() if k != "base"})


def merged(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """`base` with `override` laid over it, nested mappings merged key by key."""
    result = copy.deepcopy(dict(base))
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(result.get(key), Mapping):
            result[key] = merged(result[key], value)
        else:
            result[key] = copy.deepcopy(value)
    return result


def engine_flags(release: str) -> frozenset[str] | None:
    """The `vllm serve` flags of a vLLM release (engines/vllm-<release>.yaml, read from its
    source by tools/engine_flags.py), or None for a release the catalogue does not know."""
    entry = resources.files(__package__).joinpath("engines", f"vllm-{release}.yaml")
    if not entry.is_file():
        return None
    return frozenset(load_yaml(entry.read_text())["flags"])

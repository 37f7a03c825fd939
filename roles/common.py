"""What every role shares: its defaults, its templates, and the node it works on."""

from __future__ import annotations

import string
from functools import cache
from pathlib import Path
from typing import Any

import yaml

ROLES = Path(__file__).resolve().parent


@cache
def defaults(role: str) -> dict[str, Any]:
    """roles/<role>/defaults.yaml: the role's variables (documented in the file)."""
    loaded = yaml.safe_load((ROLES / role / "defaults.yaml").read_text())
    if not isinstance(loaded, dict):
        raise ValueError(f"roles/{role}/defaults.yaml does not hold a mapping")
    return loaded


def render(role: str, template: str, **values: object) -> str:
    """roles/<role>/templates/<template> with its `$placeholders` filled; a missing one raises."""
    text = (ROLES / role / "templates" / template).read_text()
    return string.Template(text).substitute({key: str(value) for key, value in values.items()})


def token(role: str) -> str:
    """The Pulumi type token of a role's component: sparkrack:roles:<Name>."""
    return f"sparkrack:roles:{role.title().replace('_', '')}"

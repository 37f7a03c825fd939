"""pydantic's validation errors as sentences: each one a `Problem` naming the field by its path
in the stack (a node by its name), with the field meant when the key is a typo."""

from __future__ import annotations

import difflib
import re
import types
import typing
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel
from pydantic_core import ErrorDetails

from sparkrack.stackspec import ClusterSpec
from sparkrack.stackspec.errors import Problem


def problem_of(error: ErrorDetails, resolved: Mapping[str, Any]) -> Problem:
    loc = error["loc"]
    path, node = _path(loc, resolved)
    message = error["msg"].removeprefix("Value error, ")
    if error["type"] == "extra_forbidden":
        close = difflib.get_close_matches(str(loc[-1]), _fields_at(loc[:-1]), n=1)
        message = "unknown field" + (f"; did you mean {close[0]!r}?" if close else " (a typo?)")
    elif error["type"] != "value_error" and isinstance(error.get("input"), str | int | float):
        message += f" (got {error['input']!r})"
    return Problem(path, message, node)


def _path(loc: tuple[int | str, ...], resolved: Mapping[str, Any]) -> tuple[str, str | None]:
    parts: list[str] = []
    node = None
    for i, key in enumerate(loc):
        if isinstance(key, int):
            parts.append(f"[{key}]")
            if loc[:i] == ("nodes",):
                node = _node_name(resolved, key)
                parts.append(f" ({node})" if node else "")
        elif key == "[key]":  # pydantic's mark for a mapping's key, not its value
            parts.append(" (the name)")
        elif _PLAIN_KEY.fullmatch(key):
            parts.append(f".{key}" if parts else key)
        else:  # a key with spaces, quotes or line breaks: shown quoted, on the message's one line
            parts.append(f"[{key!r}]")
    return "".join(parts) or "sparkrack:cluster", node


_PLAIN_KEY = re.compile(r"[A-Za-z_][\w-]*")


def _node_name(resolved: Mapping[str, Any], index: int) -> str | None:
    nodes = resolved.get("nodes")
    if isinstance(nodes, list) and index < len(nodes) and isinstance(nodes[index], Mapping):
        name = nodes[index].get("name")
        if name is None:
            return None
        # quoted unless a plain name: a ':' in it would read as the end of the field's path
        return str(name) if _PLAIN_KEY.fullmatch(str(name)) else repr(name)
    return None


def _fields_at(loc: tuple[int | str, ...]) -> list[str]:
    """The field names a model at `loc` accepts, to suggest a fix for a typo."""
    models: list[type[BaseModel]] = [ClusterSpec]
    for key in loc:
        fields = [
            m.model_fields[key] for m in models if isinstance(key, str) and key in m.model_fields
        ]
        if fields:  # else an index or a dict key: the element model is already in hand
            models = _models_in(fields[0].annotation)
    return sorted({name for model in models for name in model.model_fields})


def _models_in(annotation: object) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    args = typing.get_args(annotation)
    if isinstance(annotation, types.UnionType) or args:
        return [model for arg in args for model in _models_in(arg)]
    return []

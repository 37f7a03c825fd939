"""The stack's value as written, before the models read it: bounded (text length, entries,
nesting) and free of anything shaped like a credential. Run first, so that no later message
(pydantic's among them) repeats a secret or ten megabytes of text, and so that the models and
the planner only ever see a stack of a size people write."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import NamedTuple

from sparkrack.stackspec.errors import Problem
from sparkrack.stackspec.secrets import keep_out, secret_shape

# A 16-node stack is ~5 kB, 6 levels deep, its longest list 16 entries and its longest text a
# few dozen characters: these leave room for far larger racks and still bound `plan`.
MAX_TEXT = 1024  # characters in one value or key
MAX_ENTRIES = 256  # entries in one list or mapping
MAX_DEPTH = 10  # mappings and lists inside each other
MAX_VALUES = 10_000  # values in the whole stack
MAX_PROBLEMS = 10  # said before the rest is left unsaid: one cause usually repeats


class Found(NamedTuple):
    path: str
    value: object
    depth: int


def raw_problems(stack: str, raw: object, at: str = "") -> list[Problem]:
    """The first MAX_PROBLEMS bounds or credentials the raw `sparkrack:cluster` value breaks;
    `at` is the field a part of it was read for (a model file's: `model`)."""
    problems: list[Problem] = []
    for seen, found in enumerate(_walk(raw, at)):
        if seen >= MAX_VALUES:
            problems.append(Problem("sparkrack:cluster", f"more than {MAX_VALUES} values"))
            break
        if (problem := _problem(stack, found)) is not None:
            problems.append(problem)
        if len(problems) >= MAX_PROBLEMS:
            break
    return problems


def _problem(stack: str, found: Found) -> Problem | None:
    path, value, depth = found
    if isinstance(value, str):
        if len(value) > MAX_TEXT:
            return Problem(path, f"{len(value)} characters: at most {MAX_TEXT} in one value")
        what = secret_shape(value)
        return Problem(path, keep_out(what, stack)) if what else None
    if isinstance(value, Mapping | list | tuple) and len(value) > MAX_ENTRIES:
        return Problem(path, f"{len(value)} entries: at most {MAX_ENTRIES} in one list or mapping")
    if isinstance(value, Mapping | list | tuple) and depth >= MAX_DEPTH:
        return Problem(path, f"nested more than {MAX_DEPTH} deep")
    return None


def _walk(value: object, path: str = "", depth: int = 0) -> Iterator[Found]:
    """Every value with its field path, keys first; what breaks a bound is not entered."""
    yield Found(path or "sparkrack:cluster", value, depth)
    if isinstance(value, Mapping | list | tuple) and (
        len(value) > MAX_ENTRIES or depth >= MAX_DEPTH
    ):
        return
    if isinstance(value, Mapping):
        for key, item in value.items():
            where = _join(path, key)
            if isinstance(key, str):
                yield Found(f"{where} (the name)", key, depth + 1)
            yield from _walk(item, where, depth + 1)
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            yield from _walk(item, f"{path}[{index}]", depth + 1)


_PLAIN_KEY = re.compile(r"[A-Za-z_][\w-]*")


def _join(path: str, key: object) -> str:
    """`serving.env.NAME`, as load's messages name fields; an odd key quoted and cut short."""
    if isinstance(key, str) and secret_shape(key):
        return f"{path}[a name shaped like a credential]"
    if isinstance(key, str) and _PLAIN_KEY.fullmatch(key) and len(key) <= 64:
        return f"{path}.{key}" if path else key
    shown = repr(key) if len(repr(key)) <= 40 else repr(key)[:37] + "..."
    return f"{path}[{shown}]"

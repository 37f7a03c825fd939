"""The one YAML reader: safe, and refusing a key given twice in one mapping.

PyYAML keeps the last of two equal keys without a word, while Pulumi refuses such a stack file:
`sparkrack plan` and `pulumi up` must not read one file two ways.

A stack file (and a model file it names) is someone else's text: its aliases are refused, not
expanded. Nine levels of nested aliases in 1.4 kB would expand to ~69 GB (a billion laughs),
and a stack has nothing to say twice that a shorter file could not spell out.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import yaml


class DuplicateKey(yaml.constructor.ConstructorError):
    """A mapping names the same key twice."""


class AliasRefused(yaml.composer.ComposerError):
    """A stack file refers back to an anchor (`*name`)."""


class UniqueKeyLoader(yaml.SafeLoader):
    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, yaml.Node] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if not isinstance(key, Hashable):  # `? {a: 1}`: PyYAML's own check comes later
                raise yaml.constructor.ConstructorError(
                    "while reading a mapping",
                    node.start_mark,
                    f"found a key that is a {type(key).__name__}, not a name",
                    key_node.start_mark,
                )
            if key in seen:
                raise DuplicateKey(
                    "while reading a mapping",
                    node.start_mark,
                    f"found the key {key!r} twice (first {seen[key].start_mark.line + 1})",
                    key_node.start_mark,
                )
            seen[key] = key_node
        return super().construct_mapping(node, deep=deep)


class StackLoader(UniqueKeyLoader):
    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        if self.check_event(yaml.AliasEvent):
            alias = self.peek_event()  # type: ignore[no-untyped-call]
            raise AliasRefused(
                None,
                None,
                f"found the alias *{alias.anchor}: a stack file spells every value out"
                " (aliases are refused: a few nested ones expand to gigabytes)",
                alias.start_mark,
            )
        return super().compose_node(parent, index)


def load_yaml(text: str) -> Any:
    return yaml.load(text, Loader=UniqueKeyLoader)


def load_stack_yaml(text: str) -> Any:
    """A stack or model file: as `load_yaml`, its aliases refused."""
    return yaml.load(text, Loader=StackLoader)


def yaml_error_line(error: yaml.YAMLError) -> str:
    """PyYAML's error on one line (its own text spans four, with a caret under the spot)."""
    if not isinstance(error, yaml.MarkedYAMLError):
        return " ".join(str(error).split())
    mark = error.problem_mark or error.context_mark
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
    what = ", ".join(part for part in (error.context, error.problem) if part)
    return where + " ".join(what.split())

"""The one YAML reader: safe, and refusing a key given twice in one mapping.

PyYAML keeps the last of two equal keys without a word, while Pulumi refuses such a stack file:
`sparkrack plan` and `pulumi up` must not read one file two ways.
"""

from __future__ import annotations

from typing import Any

import yaml


class DuplicateKey(yaml.constructor.ConstructorError):
    """A mapping names the same key twice."""


class UniqueKeyLoader(yaml.SafeLoader):
    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, yaml.Node] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise DuplicateKey(
                    "while reading a mapping",
                    node.start_mark,
                    f"found the key {key!r} twice (first {seen[key].start_mark.line + 1})",
                    key_node.start_mark,
                )
            seen[key] = key_node
        return super().construct_mapping(node, deep=deep)


def load_yaml(text: str) -> Any:
    return yaml.load(text, Loader=UniqueKeyLoader)

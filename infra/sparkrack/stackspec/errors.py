"""The one error a bad stack produces: it names the stack, the node and the field.

It lives beside the stack's models, not in the loader, so that the spec checks and the planner,
which must not depend on the module that reads files, raise it too.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple


class Problem(NamedTuple):
    """One thing wrong with a stack: where (a field path such as `fabric.cables[0].b`), what, and
    the node it concerns when there is one."""

    path: str
    message: str
    node: str | None = None

    def describe(self) -> str:
        # A path into `nodes[i]` already carries the node's name; elsewhere add it.
        where = self.path
        if self.node and f"({self.node})" not in where:
            where = f"{where} (node {self.node})"
        return f"{where}: {self.message}"


class SpecError(ValueError):
    """A stack that sparkrack refuses, found before anything touches a node."""

    def __init__(self, stack: str, problems: Sequence[Problem]) -> None:
        self.stack = stack
        self.problems = tuple(problems)
        super().__init__("\n".join(f"stack {stack}: {p.describe()}" for p in self.problems))

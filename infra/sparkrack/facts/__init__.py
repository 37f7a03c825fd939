"""Pure reads of live node state: each fact is a command and a parser of its output.

Parsers never touch a node, so they are golden-tested on output captured from real nodes. A
command that can find nothing (no such file, container, unit) prints an answer for the parser
instead of failing: absence is a reading, and only a broken node or connection raises. This
package imports no transport: sparkrack.asking runs a fact on a node, and testinfra's host runs
it in the checks (verify/checks/readings.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Generic, TypeVar

from sparkrack.text.commands import as_user as user_script  # `Fact.as_user` is a method

T = TypeVar("T")


@dataclass(frozen=True)
class Fact(Generic[T]):
    """A read-only command (quoted by its builder) and the parser of its stdout."""

    command: str
    parse: Callable[[str], T]
    sudo: bool = False
    stdin: str | None = None  # a script the command reads (python3 -), never a secret
    timeout_s: int | None = None  # None: the transport's usual bound for a command
    # Whether an answer may serve a refresh's other askers (sparkrack.asking): not one that says
    # the asking failed, which is asked again.
    keep: Callable[[T], bool] = lambda _: True

    def as_user(self, user: str) -> Fact[T]:
        """The same read run by `user` in its home: its rootless Podman, its files."""
        return replace(self, command=user_script(user, self.command), sudo=False)

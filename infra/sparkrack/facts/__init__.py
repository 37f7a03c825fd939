"""Pure reads of live node state: each fact is a command and a parser of its output.

Parsers never touch a node, so they are golden-tested on output captured from real nodes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from sparkrack import ssh

T = TypeVar("T")


@dataclass(frozen=True)
class Fact(Generic[T]):
    """A read-only command (quoted by its builder) and the parser of its stdout."""

    command: str
    parse: Callable[[str], T]
    sudo: bool = False


def gather(target: ssh.Target, fact: Fact[T]) -> T:
    """Run the fact on the node and parse it; a failing command raises SshError naming the node."""
    return fact.parse(ssh.run(target, fact.command, sudo=fact.sudo).stdout)

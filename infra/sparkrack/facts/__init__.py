"""Pure reads of live node state: each fact is a command and a parser of its output.

Parsers never touch a node, so they are golden-tested on output captured from real nodes. A
command that can find nothing (no such file, container, unit) prints an answer for the parser
instead of failing: absence is a reading, and only a broken node or connection raises.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Generic, TypeVar

from sparkrack import ssh
from sparkrack.facts import shared

T = TypeVar("T")


@dataclass(frozen=True)
class Fact(Generic[T]):
    """A read-only command (quoted by its builder) and the parser of its stdout."""

    command: str
    parse: Callable[[str], T]
    sudo: bool = False
    stdin: str | None = None  # a script the command reads (python3 -), never a secret
    timeout_s: int = ssh.COMMAND_TIMEOUT_S
    # Whether an answer may serve the refresh's other askers (facts.shared): not one that says
    # the asking failed, which is asked again.
    keep: Callable[[T], bool] = lambda _: True

    def as_user(self, user: str) -> Fact[T]:
        """The same read run by `user` in its home: its rootless Podman, its files."""
        return replace(self, command=ssh.as_user(user, self.command), sudo=False)


def gather(target: ssh.Target, fact: Fact[T]) -> T:
    """Run the fact on the node and parse it; a failing command raises SshError naming the node.
    In a refresh, a question the node was just asked is answered once (facts.shared)."""

    def ask() -> T:
        done = ssh.run(
            target, fact.command, sudo=fact.sudo, stdin=fact.stdin, timeout=fact.timeout_s
        )
        return fact.parse(done.stdout)

    if not shared.sharing():
        shared.forget(target.node)
        return ask()
    parser = f"{fact.parse.__module__}.{fact.parse.__qualname__}"  # a builder's lambda: one name
    key = (target.node, target.host, fact.command, fact.sudo, fact.stdin, parser)
    return shared.answer(key, ask, fact.keep)

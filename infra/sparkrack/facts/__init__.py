"""Pure reads of live node state: each fact is a command and a parser of its output.

Parsers never touch a node, so they are golden-tested on output captured from real nodes. A
command that can find nothing (no such file, container, unit) prints an answer for the parser
instead of failing: absence is a reading, and only a broken node or connection raises.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Generic, TypeVar

from sparkrack.facts import batch, shared
from sparkrack.facts.batch import Question
from sparkrack.transport import ssh
from sparkrack.transport.target import SshError, Target
from sparkrack.transport.target import as_user as user_script  # `Fact.as_user` is a method

T = TypeVar("T")

# A refresh's batch of some fifty questions per node: each is a quick read, so minutes mean a
# node in trouble, whose questions are then asked (and time out) one by one.
BATCH_TIMEOUT_S = 120


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
        return replace(self, command=user_script(user, self.command), sudo=False)


def gather(target: Target, fact: Fact[T]) -> T:
    """Run the fact on the node and parse it; a failing command raises SshError naming the node.
    In a refresh, a question the node was just asked is answered once, and the node's usual
    questions are asked ahead in one round trip (facts.shared)."""

    def ask() -> T:
        if batched(fact):
            early = shared.ahead(target, Question(fact.command, fact.sudo), ask_ahead(target))
            if early is not None:
                with contextlib.suppress(Exception):  # what the parser refuses is asked again
                    return fact.parse(early)
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


def batched(fact: Fact[Any]) -> bool:
    """Whether a refresh may ask this ahead with the node's other questions: not a fact that
    feeds a script on stdin or needs longer than a command's usual time (hashing weights)."""
    return shared.sharing() and fact.stdin is None and fact.timeout_s == ssh.COMMAND_TIMEOUT_S


def ask_ahead(target: Target) -> Callable[[list[Question]], dict[Question, str]]:
    """Runs a batch of questions on the node in one session (facts.batch); a node that cannot be
    used answers none of them, and each is then asked, and fails, on its own."""

    def ask_all(questions: list[Question]) -> dict[Question, str]:
        if not questions:
            return {}
        nonce = secrets.token_hex(8)
        try:
            done = ssh.run(
                target,
                "sh -s",
                stdin=batch.script(questions, nonce),
                check=False,
                timeout=BATCH_TIMEOUT_S,
            )
        except SshError:
            return {}
        return batch.answers(done.stdout, questions, nonce)

    return ask_all

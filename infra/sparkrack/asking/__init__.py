"""Asking nodes: a fact (sparkrack.facts, pure) run on a node over SSH, and what makes a refresh
of many resources ask each node little: one answer per question (`shared`), the node's usual
questions asked ahead in one round trip (`batch`, `learned`), and the update trusting its
preview's reads (`read_once`). All of it behind one switch (sparkrack.config.speedups); why each
is worth its code, measured, is in docs/speed.md.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from sparkrack.asking import batch, read_once, shared
from sparkrack.asking.batch import Question
from sparkrack.facts import Fact
from sparkrack.transport import ssh
from sparkrack.transport.target import SshError, Target

T = TypeVar("T")

# A refresh's batch of some fifty questions per node: each is a quick read, so minutes mean a
# node in trouble, whose questions are then asked (and time out) one by one.
BATCH_TIMEOUT_S = 120


def gather(target: Target, fact: Fact[T]) -> T:
    """Run the fact on the node and parse it; a failing command raises SshError naming the node.
    In a refresh, a question the node was just asked is answered once, and the node's usual
    questions are asked ahead in one round trip (asking.shared)."""

    def ask() -> T:
        if batched(fact):
            early = shared.ahead(target, Question(fact.command, fact.sudo), ask_ahead(target))
            if early is not None:
                with contextlib.suppress(Exception):  # what the parser refuses is asked again
                    return fact.parse(early)
        timeout = ssh.COMMAND_TIMEOUT_S if fact.timeout_s is None else fact.timeout_s
        done = ssh.run(target, fact.command, sudo=fact.sudo, stdin=fact.stdin, timeout=timeout)
        return fact.parse(done.stdout)

    if not shared.sharing():
        shared.forget(target.node)
        return ask()
    parser = f"{fact.parse.__module__}.{fact.parse.__qualname__}"  # a builder's lambda: one name
    key = (target.node, target.host, fact.command, fact.sudo, fact.stdin, parser)
    return shared.answer(key, ask, fact.keep)


def read_in_refresh(
    id_: str,
    props: Mapping[str, Any],
    secret: Iterable[str],
    observe: Callable[[], dict[str, Any] | None],
    recordable: bool,
) -> dict[str, Any] | None:
    """A resource's values in a refresh: the stored `props` as they are when this engine run's
    earlier read found the node so (`up`'s update after its preview: asking.read_once); otherwise
    `observe()`, its node's questions shared (asking.shared), and recorded for the run's next read
    when it finds what `props` say and the resource is `recordable`."""
    record = read_once.key(id_, props, secret)
    if read_once.confirmed(record):
        return dict(props)
    with shared.answering_once():
        live = observe()
    unchanged = live is not None and all(props.get(key) == live[key] for key in live)
    if unchanged and recordable:
        read_once.confirm(record)
    return live


def batched(fact: Fact[Any]) -> bool:
    """Whether a refresh may ask this ahead with the node's other questions: not a fact that
    feeds a script on stdin or needs longer than a command's usual time (hashing weights)."""
    return shared.sharing() and fact.stdin is None and fact.timeout_s is None


def ask_ahead(target: Target) -> Callable[[list[Question]], dict[Question, str]]:
    """Runs a batch of questions on the node in one session (asking.batch); a node that cannot be
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

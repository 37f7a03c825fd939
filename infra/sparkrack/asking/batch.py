"""Many questions to one node in one round trip: a script that asks each and marks its answer
(docs/speed.md, "Asking ahead").

The root questions run under one `sudo`, each question still its own `sh -c` with nothing on
stdin, exactly the command line it would have run alone. Pure text: asking.shared runs it. An
answer is the question's stdout, kept only when it exited 0: a failing question is asked again on
its own, so its error reads as it always did.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Question:
    """A command line as a fact runs it (as the login user, or as root through sudo)."""

    command: str
    sudo: bool = False


def script(questions: Sequence[Question], nonce: str) -> str:
    """The script for `sh -s` on the node: the login user's questions, then root's under one sudo.
    `nonce` (random per batch) marks the answers, so no output can pass for a mark."""
    plain = [ask(i, q, nonce) for i, q in enumerate(questions) if not q.sudo]
    root = [ask(i, q, nonce) for i, q in enumerate(questions) if q.sudo]
    lines = [*plain]
    if root:  # the heredoc's end is the nonce, which no question's line holds
        lines += [f"sudo -n sh -s <<'{nonce}'", *root, nonce]
    return "\n".join(lines) + "\n"


def ask(index: int, question: Question, nonce: str) -> str:
    """One question in its own shell, its stdin empty (the script is the batch's stdin), then its
    mark: a newline (an answer need not end in one), the nonce, its number and its exit status."""
    run = f"sh -c {shlex.quote(question.command)} </dev/null 2>/dev/null"
    return f"{run}; printf '\\n%s %s %s\\n' {nonce} {index} \"$?\""


def answers(stdout: str, questions: Sequence[Question], nonce: str) -> dict[Question, str]:
    """Each question that exited 0 -> its stdout, from the batch's output."""
    found: dict[Question, str] = {}
    start = 0
    for mark in re.finditer(rf"\n{re.escape(nonce)} (\d+) (\d+)\n", stdout):
        index, status = int(mark.group(1)), int(mark.group(2))
        if status == 0 and index < len(questions):
            found[questions[index]] = stdout[start : mark.start()]
        start = mark.end()
    return found


def batchable(questions: Iterable[Question]) -> list[Question]:
    """Each question once, in a stable order (a batch's script is the same for the same set)."""
    return sorted(set(questions), key=lambda q: (q.sudo, q.command))

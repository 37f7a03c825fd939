"""One answer per question per node during a refresh, and the node's usual questions asked
ahead (docs/speed.md, "Answer sharing").

While a thread is in a resource's `read` (`answering_once`), a fact's answer is kept per node and
question (its command and parser), and the same question asked of the same node again within
SHARED_FOR_S is answered from it; a question asked while another thread is still asking it waits
for that answer. The first read of a node in a refresh asks the node, in one round trip, every
question its last refresh asked (asking.learned, asking.batch); each of those answers serves the
first asker of its question, once (`ahead`).

Only reads share: a read outside a refresh (an apply's read-back, a wait) forgets what was kept
for that node first. A failed command, an output its parser refuses, or an answer the fact says
is not worth keeping is never kept. With the switch off (config.speedups) nothing is shared.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

from sparkrack.asking import learned
from sparkrack.asking.batch import Question, batchable
from sparkrack.config.speedups import speedups_on
from sparkrack.transport.target import Target

T = TypeVar("T")

SHARED_FOR_S = 30.0  # longer than one question's spread over a sim-16 refresh, shorter than two

Key = tuple[Hashable, ...]  # node, host, command, sudo, stdin, the parser's name


@dataclass
class Answer:
    ready: threading.Event = field(default_factory=threading.Event)
    kept: bool = False  # False: failed, not worth keeping, or not answered yet
    value: Any = None
    at: float = 0.0


@dataclass
class Batch:
    """A node's questions asked in one round trip: question -> stdout, each served once."""

    ready: threading.Event = field(default_factory=threading.Event)
    answers: dict[Question, str] = field(default_factory=dict)
    at: float = 0.0


_reading = threading.local()
_lock = threading.Lock()
_answers: dict[Key, Answer] = {}
_batches: dict[str, Batch] = {}  # by node
_asked: dict[Target, set[Question]] = {}  # what each node was asked in this process's refreshes
_known: dict[Target, frozenset[Question]] = {}  # what its learned list holds
_saving = threading.Lock()


@contextmanager
def answering_once() -> Iterator[None]:
    """This thread's reads share their answers (a resource's `read` in a refresh), unless the
    speed-ups are off."""
    _reading.active = speedups_on()
    try:
        yield
    finally:
        _reading.active = False
        save_asked()


def sharing() -> bool:
    return bool(getattr(_reading, "active", False))


def forget(node: str) -> None:
    """Drop what was kept for `node`: it may have changed since."""
    with _lock:
        for key in [key for key in _answers if key[0] == node]:
            del _answers[key]
        _batches.pop(node, None)


def forget_all() -> None:
    """Drop every kept answer (a test's fake nodes answer anew)."""
    with _lock:
        _answers.clear()
        _batches.clear()
        _asked.clear()
        _known.clear()


def answer(key: Key, ask: Callable[[], T], keep: Callable[[T], bool]) -> T:
    """`ask()`, or what an identical question got from this node a moment ago."""
    with _lock:
        entry = _answers.get(key)
        asking = entry is None or (
            entry.ready.is_set() and time.monotonic() - entry.at >= SHARED_FOR_S
        )
        if asking:
            entry = _answers[key] = Answer()
    assert entry is not None
    if not asking:  # another thread asks, or has just asked: its answer serves
        entry.ready.wait()
        if entry.kept:
            value: T = entry.value
            return value
        return ask()  # it got nothing worth keeping: this thread asks for itself
    try:
        found = ask()
        entry.value, entry.kept = found, keep(found)
        return found
    finally:
        entry.at = time.monotonic()
        if not entry.kept:
            with _lock:
                if _answers.get(key) is entry:
                    del _answers[key]
        entry.ready.set()


def ahead(
    target: Target, question: Question, ask_all: Callable[[list[Question]], dict[Question, str]]
) -> str | None:
    """`question`'s answer from the node's batch, which the first caller in a refresh runs with
    `ask_all` over what the node was asked last time (others wait for it); None when the batch
    did not hold it or it was served already (a second asker asks for itself)."""
    with _lock:
        _asked.setdefault(target, set()).add(question)
        batch = _batches.get(target.node)
        running = batch is None or (
            batch.ready.is_set() and time.monotonic() - batch.at >= SHARED_FOR_S
        )
        if running:
            batch = _batches[target.node] = Batch()
    assert batch is not None
    if running:
        try:
            questions = learned.load(target)
            with _lock:
                _known[target] = frozenset(questions)
            batch.answers = ask_all(batchable(questions))
        finally:
            batch.at = time.monotonic()
            batch.ready.set()
    batch.ready.wait()
    with _lock:
        return batch.answers.pop(question, None)


def save_asked() -> None:
    """Write into each node's learned list what this process asked it, once that holds a question
    the list lacks (a steady refresh writes nothing; one that asks anew drops what nobody asks).
    Only a node whose list is loaded: any read's end saves, and a node still loading its list has
    been asked one question or a few so far, which would replace the whole list (seen in the
    bench: a list of 48 cut to 3, so the next refresh asked that node 47 questions one by one)."""
    with _saving:
        with _lock:
            due = {
                target: frozenset(asked)
                for target, asked in _asked.items()
                if target in _known and not asked <= _known[target]
            }
            _known.update(due)
        for target, questions in due.items():
            learned.save(target, batchable(questions))

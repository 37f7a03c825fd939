"""One answer per question per node during a refresh.

A refresh reads every resource of a node, and several ask the node the same question: each
Container on a host which Podman it runs, each of the Ray join waves and the cluster which nodes
are alive (a Ray driver start-up on the head, 2-3 s of its CPU each time; five of them per sim-16
refresh, measured with tests/bench/speed.py's trace). While a thread is in a resource's `read`
(`answering_once`), a fact's answer is kept per node and question (its command and parser), and
the same question asked of the same node again within SHARED_FOR_S is answered from it; a
question asked while another thread is still asking it waits for that answer instead of asking
twice.

Only reads share: a read outside a refresh (an apply's read-back, a wait) forgets what was kept
for that node first, so nothing an apply changed is answered from before it. A failed command, an
output its parser refuses, or an answer the fact says is not worth keeping (a Ray query that
failed: it is asked again) is never kept.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")

SHARED_FOR_S = 30.0  # longer than one question's spread over a sim-16 refresh, shorter than two

Key = tuple[Hashable, ...]  # node, host, command, sudo, stdin, the parser's name


@dataclass
class Answer:
    ready: threading.Event = field(default_factory=threading.Event)
    kept: bool = False  # False: failed, not worth keeping, or not answered yet
    value: Any = None
    at: float = 0.0


_reading = threading.local()
_lock = threading.Lock()
_answers: dict[Key, Answer] = {}


@contextmanager
def answering_once() -> Iterator[None]:
    """This thread's reads share their answers (a resource's `read` in a refresh)."""
    _reading.active = True
    try:
        yield
    finally:
        _reading.active = False


def sharing() -> bool:
    return bool(getattr(_reading, "active", False))


def forget(node: str) -> None:
    """Drop what was kept for `node`: it may have changed since."""
    with _lock:
        for key in [key for key in _answers if key[0] == node]:
            del _answers[key]


def forget_all() -> None:
    """Drop every kept answer (a test's fake nodes answer anew)."""
    with _lock:
        _answers.clear()


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

"""Unit tests' shared fixtures: every test's fake nodes answer anew; no backend is read."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sparkrack.asking import learned, read_once, shared
from sparkrack.ops import claims


@pytest.fixture(autouse=True)
def fresh_answers(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A refresh keeps a node's answers for a moment (asking.shared); one test's fake node must not
    answer the next test's questions. Nor is a fake node asked ahead what an earlier refresh
    asked it (asking.learned), unless a test says so: fakes answer one command at a time. Nor
    does a read trust an earlier one (asking.read_once): a test's reads run under no engine."""
    monkeypatch.setattr(learned, "load", lambda _target: [])
    monkeypatch.setattr(learned, "save", lambda _target, _questions: None)
    monkeypatch.setattr(read_once, "engine_run", lambda: None)  # no engine: every read asks
    shared.forget_all()
    read_once.forget_all()
    yield
    shared.forget_all()
    read_once.forget_all()


@pytest.fixture(autouse=True)
def no_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    """`sparkrack plan` reads the other stacks' claims when the environment names a backend
    (ops.claims); a unit test reads none unless it names one and replaces the read."""
    monkeypatch.delenv(claims.BACKEND_ENV, raising=False)

"""Unit tests' shared fixture: every test's fake nodes answer anew."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sparkrack.facts import learned, shared
from sparkrack.resources import read_once


@pytest.fixture(autouse=True)
def fresh_answers(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A refresh keeps a node's answers for a moment (facts.shared); one test's fake node must not
    answer the next test's questions. Nor is a fake node asked ahead what an earlier refresh
    asked it (facts.learned), unless a test says so: fakes answer one command at a time. Nor
    does a read trust an earlier one (resources.read_once): a test's reads run under no engine."""
    monkeypatch.setattr(learned, "load", lambda _target: [])
    monkeypatch.setattr(learned, "save", lambda _target, _questions: None)
    monkeypatch.setattr(read_once, "engine_run", lambda: None)  # no engine: every read asks
    shared.forget_all()
    read_once.forget_all()
    yield
    shared.forget_all()
    read_once.forget_all()

"""Unit tests' shared fixture: every test's fake nodes answer anew."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sparkrack.facts import shared


@pytest.fixture(autouse=True)
def fresh_answers() -> Iterator[None]:
    """A refresh keeps a node's answers for a moment (facts.shared); one test's fake node must not
    answer the next test's questions."""
    shared.forget_all()
    yield
    shared.forget_all()

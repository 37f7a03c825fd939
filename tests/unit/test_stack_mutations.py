"""Any mutation of a shipped stack file, through `sparkrack plan` as a person runs it: it is
planned, or refused in lines that each name the stack and a field. Never a traceback, never a
hang (each run bounded by an alarm), never a file written (an audit hook watches every open,
rename and removal while it runs).

The budget is fixed and small, for the fast gate; the examples differ from run to run, so the
gate explores a little more each time it runs.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, Phase, event, given, settings
from hypothesis import strategies as st

from sparkrack.cli import main

from .support import STACKS

pytestmark = pytest.mark.unit

# One plan of sim-16 takes well under a second; a hang never ends. The bound leaves room for a
# machine running racks beside the tests (load averages above 100 were seen on two cores).
BOUND_S = 60
EXAMPLES = int(os.environ.get("SPARKRACK_MUTATIONS", "30"))  # more for a longer search

# --- no file written: Python's audit events, watched on this thread while a plan runs ----------

WRITES = {"os.rename", "os.replace", "os.remove", "os.rmdir", "os.mkdir", "os.symlink", "os.link"}
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
_watched: dict[int, list[str]] = {}


def _audit(name: str, args: tuple[Any, ...]) -> None:
    written = _watched.get(threading.get_ident())
    if written is None:
        return
    if name == "open" and len(args) == 3:
        path, mode, flags = args
        if (isinstance(mode, str) and set(mode) & set("wax+")) or (flags or 0) & WRITE_FLAGS:
            written.append(f"open {path!r} {mode or flags}")
    elif name in WRITES:
        written.append(f"{name} {args[:2]!r}")


sys.addaudithook(_audit)  # hooks stay for the process; this one is idle unless watching


@contextlib.contextmanager
def no_file_written() -> Iterator[list[str]]:
    written: list[str] = []
    _watched[threading.get_ident()] = written
    try:
        yield written
    finally:
        del _watched[threading.get_ident()]


class Hung(Exception):
    pass


@contextlib.contextmanager
def bounded(seconds: int) -> Iterator[None]:
    """An alarm after `seconds`; the timer pytest-timeout may have set is put back after."""

    def stop(signum: int, frame: object) -> None:
        raise Hung(f"no answer in {seconds} s")

    previous = signal.signal(signal.SIGALRM, stop)
    started = time.monotonic()
    outer, _ = signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if outer:
            signal.setitimer(signal.ITIMER_REAL, max(outer - (time.monotonic() - started), 0.01))


# --- mutations --------------------------------------------------------------------------------

HOSTILE_TEXT = ["$(id)", "\n", "0.0.0.0", "127.0.0.1", "../..", "%h", "hf_" + "a" * 34, "*a", ""]
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=30),
    st.sampled_from(HOSTILE_TEXT),
    st.integers(min_value=0, max_value=3000).map(lambda n: "x" * n),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=8,
)
# Pieces of YAML that have broken readers elsewhere: aliases, tags, unclosed flows, a BOM.
YAML_PIECES = ["*a", "&a ", "!!python/object:os.system ", "{", "[", "? ", "\t", "\ufeff", "%YAML"]


def paths(value: Any, here: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in the document a mutation can touch, the root's children first."""
    found = [here]
    if isinstance(value, dict):
        for key, item in value.items():
            found += paths(item, (*here, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += paths(item, (*here, index))
    return found


def mutate(document: Any, where: tuple[Any, ...], how: str, value: Any, choice: int) -> Any:
    if not where:
        return value
    parent = document
    for step in where[:-1]:
        parent = parent[step]
    last = where[-1]
    if how == "delete":
        del parent[last]
    elif how == "add" and isinstance(parent[last], dict):
        parent[last][f"extra{len(parent[last])}"] = value
    elif how == "repeat" and isinstance(parent[last], list) and parent[last]:
        parent[last] = parent[last] * 40
    elif how == "nudge":
        parent[last] = nudged(parent[last], choice)
    else:
        parent[last] = value
    return document


SUFFIXES = ["-1", "x", "0", ".5", "$(id)", " ", ":9", "%"]


def nudged(old: Any, choice: int) -> Any:
    """A change of the kind a person makes: text extended, a number moved, a list shortened or
    grown, a key dropped; `choice` picks which."""
    if isinstance(old, str):
        return old + SUFFIXES[choice % len(SUFFIXES)]
    if isinstance(old, bool):
        return not old
    if isinstance(old, int | float):
        return [old + 1, old * 2, old // 2, 0, -1, old * 10**6][choice % 6]
    if isinstance(old, list):
        return old[1:] if choice % 2 else [*old, *old[:1]]
    if isinstance(old, dict) and old:
        return {k: v for i, (k, v) in enumerate(old.items()) if i != choice % len(old)}
    return old


@st.composite
def mutated_stack(draw: st.DrawFn) -> tuple[str, str]:
    """(stack name, the file's text) after one or two mutations."""
    stack = draw(st.sampled_from(["sim-2", "gb10-2", "sim-16"]))
    document = yaml.safe_load((STACKS / f"Pulumi.{stack}.yaml").read_text())
    for _ in range(draw(st.integers(min_value=1, max_value=2))):
        places = paths(document)[1:]
        if not places:  # the document is one scalar now
            break
        where = draw(st.sampled_from(places))
        how = draw(st.sampled_from(["nudge"] * 4 + ["replace", "delete", "add", "repeat"]))
        choice = draw(st.integers(min_value=0, max_value=59))
        document = mutate(document, where, how, draw(VALUES), choice)
        event(f"mutation: {how}")
    text = yaml.safe_dump(document, allow_unicode=True)
    if draw(st.sampled_from([False] * 4 + [True])):  # and, now and then, the text itself
        at = draw(st.integers(min_value=0, max_value=len(text)))
        text = text[:at] + draw(st.sampled_from(YAML_PIECES)) + text[at:]
        event("text mutated")
    return stack, text


def plan(stacks: Path, stack: str) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(["plan", "--stack", stack, "--stacks-dir", str(stacks)])
    return status, err.getvalue()


STACKS_DIR = Path(tempfile.mkdtemp(prefix="sparkrack-mutations-"))
# A field path: a config key (`sparkrack:cluster`), names, indices, odd keys and node names
# in quotes (`env['a: b']`).
FIELD = r"""(?:sparkrack:\w+|'[^']*'|"[^"]*"|[^:'"])+?"""
REFUSAL = re.compile(rf"(sparkrack: )?stack (?P<stack>[\w.-]+): (?P<field>{FIELD}): \S")


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    phases=[Phase.explicit, Phase.generate, Phase.shrink],  # no explain: its tracing is slow
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(mutated_stack())
def test_a_mutated_stack_is_planned_or_refused_in_lines_naming_a_field(
    stack_text: tuple[str, str],
) -> None:
    stack, text = stack_text
    (STACKS_DIR / f"Pulumi.{stack}.yaml").write_text(text)
    started = time.monotonic()
    with no_file_written() as written, bounded(BOUND_S):
        status, err = plan(STACKS_DIR, stack)
    assert written == [], written
    assert time.monotonic() - started < BOUND_S
    if status == 0:
        event("planned")
        return
    assert status == 2, err
    lines = err.splitlines()
    assert lines and "Traceback" not in err, err
    for line in lines:
        found = REFUSAL.match(line)
        assert found and found["stack"] == stack and found["field"].strip(), line
    event("refused")


def test_the_watch_sees_a_file_written() -> None:
    with no_file_written() as written:
        (STACKS_DIR / "probe").write_text("x")
    assert written and "probe" in written[0]


def test_the_bound_stops_a_hang() -> None:
    with pytest.raises(Hung), bounded(1):
        time.sleep(5)


def test_the_bound_gives_back_an_outer_timer() -> None:
    signal.setitimer(signal.ITIMER_REAL, 100)
    try:
        with bounded(5):
            pass
        left, _ = signal.getitimer(signal.ITIMER_REAL)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    assert 90 < left <= 100

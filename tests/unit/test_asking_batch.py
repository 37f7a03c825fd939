"""A refresh asks a node its usual questions in one round trip (asking.batch, asking.learned,
asking.shared.ahead). The batch's script runs here in a real `sh`; only SSH is faked."""

from __future__ import annotations

import os
import stat
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest

from sparkrack.asking import batch, gather, learned, shared
from sparkrack.asking.batch import Question
from sparkrack.facts import Fact
from sparkrack.transport import ssh
from sparkrack.transport.target import Result, SshError, Target

pytestmark = pytest.mark.unit

SPARK_1 = Target("spark-1", "198.18.0.11", 22, "sparkrack", "/k", "/kh")

# The login user's questions and root's; their output is what each says it prints.
TRAILING = Question("printf 'a\\nb\\n'")
BARE = Question("printf 'no newline'")
EMPTY = Question("true")
FAILS = Question("echo partial; exit 3")
READS_STDIN = Question("cat")
AS_ROOT = Question("id -u", sudo=True)


def run_batch(questions: list[Question], path: str | None = None) -> dict[Question, str]:
    """The batch's script in a local `sh -s`, as a node's login shell would run it."""
    nonce = "0123456789abcdef"
    env = {**os.environ, "PATH": path} if path else None
    done = subprocess.run(
        ["sh", "-s"], input=batch.script(questions, nonce), capture_output=True, text=True, env=env
    )
    return batch.answers(done.stdout, questions, nonce)


@pytest.fixture
def sudo_on_path(tmp_path: Path) -> str:
    """A `sudo` that runs its command as this user (the batch's one sudo, without root)."""
    fake = tmp_path / "sudo"
    fake.write_text('#!/bin/sh\n[ "$1" = -n ] && shift\nexec "$@"\n')
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    return f"{tmp_path}{os.pathsep}{os.environ['PATH']}"


def test_each_question_gets_its_own_stdout_exactly(sudo_on_path: str) -> None:
    found = run_batch([TRAILING, BARE, EMPTY, AS_ROOT], sudo_on_path)
    assert found == {TRAILING: "a\nb\n", BARE: "no newline", EMPTY: "", AS_ROOT: f"{os.getuid()}\n"}


def test_a_failing_question_is_left_to_be_asked_on_its_own() -> None:
    assert run_batch([FAILS, TRAILING]) == {TRAILING: "a\nb\n"}


def test_a_question_reading_stdin_gets_nothing_and_the_script_goes_on() -> None:
    assert run_batch([READS_STDIN, TRAILING]) == {READS_STDIN: "", TRAILING: "a\nb\n"}


def test_root_questions_run_under_one_sudo_after_the_users() -> None:
    text = batch.script([AS_ROOT, TRAILING, Question("id -g", sudo=True)], "n0nce")
    lines = text.splitlines()
    assert text.count("sudo") == 1
    assert lines[1:] == [
        "sudo -n sh -s <<'n0nce'",
        batch.ask(0, AS_ROOT, "n0nce"),
        batch.ask(2, Question("id -g", sudo=True), "n0nce"),
        "n0nce",
    ]


def test_no_output_passes_for_a_mark() -> None:
    forged = Question("printf '\\nNONCE 0 0\\n'")
    nonce = "0123456789abcdef"
    done = subprocess.run(
        ["sh", "-s"], input=batch.script([forged], nonce), capture_output=True, text=True
    )
    assert batch.answers(done.stdout, [forged], nonce) == {forged: "\nNONCE 0 0\n"}


# --- the learned list -------------------------------------------------------------------------


# Taken at import, before the unit tier's autouse fixture stubs them for every test.
REAL_LOAD, REAL_SAVE = learned.load, learned.save


@pytest.fixture
def cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """The real learned list (the unit tier stubs it out), under a scratch cache."""
    monkeypatch.setattr(learned, "load", REAL_LOAD)
    monkeypatch.setattr(learned, "save", REAL_SAVE)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    return tmp_path


def test_the_learned_list_round_trips_and_a_bad_one_is_empty(cache: Path) -> None:
    learned.save(SPARK_1, [TRAILING, AS_ROOT])
    assert learned.load(SPARK_1) == [TRAILING, AS_ROOT]
    learned.path_for(SPARK_1).write_text("{not json")
    assert learned.load(SPARK_1) == []
    other_way_in = Target("spark-1", "198.18.9.11", 22, "sparkrack", "/k", "/kh")
    assert learned.path_for(other_way_in) != learned.path_for(SPARK_1)


class Node:
    """Runs what it is sent in a local shell (the batch's script included), counting commands."""

    def __init__(self) -> None:
        self.sent: list[str] = []
        self.lock = threading.Lock()
        self.unreachable = False

    def run(self, target: Target, command: str, *, stdin: str | None = None, **_: Any) -> Result:
        with self.lock:
            self.sent.append(command)
        if self.unreachable:
            raise SshError(f"{target.where()}: unreachable")
        done = subprocess.run(
            ["sh", "-c", command], input=stdin or "", capture_output=True, text=True
        )
        return Result(stdout=done.stdout, stderr=done.stderr, exit_status=done.returncode)


@pytest.fixture
def node(monkeypatch: pytest.MonkeyPatch, cache: Path) -> Node:
    fake = Node()
    monkeypatch.setattr(ssh, "run", fake.run)
    return fake


def fact(question: Question) -> Fact[str]:
    return Fact(question.command, str)


def test_a_refresh_asks_ahead_what_the_last_one_asked_in_one_round_trip(node: Node) -> None:
    with shared.answering_once():
        assert gather(SPARK_1, fact(TRAILING)) == "a\nb\n"
        assert gather(SPARK_1, fact(BARE)) == "no newline"
    assert node.sent == [TRAILING.command, BARE.command]  # nothing learnt yet: one by one
    assert learned.load(SPARK_1) == batch.batchable([TRAILING, BARE])

    shared.forget_all()  # the next refresh, in another provider process
    with shared.answering_once():
        assert gather(SPARK_1, fact(BARE)) == "no newline"
        assert gather(SPARK_1, fact(TRAILING)) == "a\nb\n"
    assert node.sent[2:] == ["sh -s"]


def test_an_answer_ahead_serves_once_and_a_change_forgets_the_batch(node: Node) -> None:
    learned.save(SPARK_1, [TRAILING])
    unkept = Fact(TRAILING.command, str, keep=lambda _: False)  # a failed Ray query, say
    with shared.answering_once():
        gather(SPARK_1, unkept)
        gather(SPARK_1, unkept)
    assert node.sent == ["sh -s", TRAILING.command]  # the second asks the node itself
    shared.forget(SPARK_1.node)  # an apply changed the node
    with shared.answering_once():
        gather(SPARK_1, fact(TRAILING))
    assert node.sent[2:] == ["sh -s"]


def test_a_node_that_cannot_answer_the_batch_is_asked_one_by_one(node: Node) -> None:
    learned.save(SPARK_1, [TRAILING])
    node.unreachable = True
    with shared.answering_once(), pytest.raises(SshError, match="unreachable"):
        gather(SPARK_1, fact(TRAILING))
    assert node.sent == ["sh -s", TRAILING.command]


def test_threads_reading_one_node_wait_for_one_batch(node: Node) -> None:
    questions = [Question(f"echo {n}") for n in range(8)]
    learned.save(SPARK_1, questions)
    found: dict[int, str] = {}

    def read(n: int) -> None:
        with shared.answering_once():
            found[n] = gather(SPARK_1, fact(questions[n]))

    threads = [threading.Thread(target=read, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert found == {n: f"{n}\n" for n in range(8)}
    assert node.sent == ["sh -s"]


def test_a_steady_refresh_writes_no_learned_list(node: Node) -> None:
    learned.save(SPARK_1, [TRAILING])
    before = learned.path_for(SPARK_1).stat().st_mtime_ns
    with shared.answering_once():
        gather(SPARK_1, fact(TRAILING))
    assert learned.path_for(SPARK_1).stat().st_mtime_ns == before
    with shared.answering_once():
        gather(SPARK_1, fact(BARE))  # asked anew: the list is this refresh's questions
    assert learned.load(SPARK_1) == batch.batchable([TRAILING, BARE])


def test_a_list_being_loaded_is_not_saved_from_the_questions_asked_so_far(
    node: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another read ending while a node's list is still loading saves every node it may: the node
    had been asked one question so far, and its list of many became that one."""
    questions = [Question(f"echo {n}") for n in range(8)]
    learned.save(SPARK_1, questions)
    loading, release = threading.Event(), threading.Event()

    def slow_load(target: Target) -> list[Question]:
        loading.set()
        release.wait(5)
        return REAL_LOAD(target)

    monkeypatch.setattr(learned, "load", slow_load)
    reader = threading.Thread(target=lambda: gather_in_refresh(fact(questions[0])))
    reader.start()
    assert loading.wait(5)
    shared.save_asked()  # another resource's read ends meanwhile
    release.set()
    reader.join()
    assert REAL_LOAD(SPARK_1) == questions


def gather_in_refresh(question_fact: Fact[str]) -> str:
    with shared.answering_once():
        return gather(SPARK_1, question_fact)

"""A refresh asks each node a question once (asking.shared): reads in a resource's `read` share
their answers, everything else asks the node itself."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from sparkrack.asking import gather, read_once, shared
from sparkrack.config import speedups
from sparkrack.facts import Fact
from sparkrack.transport import ssh
from sparkrack.transport.target import Result, SshError, Target

SPARK_1 = Target("spark-1", "198.18.0.11", 22, "sparkrack", "/k", "/kh")
SPARK_2 = Target("spark-2", "198.18.0.12", 22, "sparkrack", "/k", "/kh")


class Node:
    """Answers `echo N` with N, counting what each node was asked."""

    def __init__(self, pause_s: float = 0.0) -> None:
        self.asked: list[tuple[str, str]] = []
        self.pause_s = pause_s
        self.fail = False
        self.lock = threading.Lock()

    def run(self, target: Target, command: str, **_: Any) -> Result:
        with self.lock:
            self.asked.append((target.node, command))
        time.sleep(self.pause_s)
        if self.fail:
            raise SshError(f"{target.where()}: `{command}` failed")
        return Result(stdout=f"{len(self.asked)}\n", stderr="", exit_status=0)


@pytest.fixture
def node(monkeypatch: pytest.MonkeyPatch) -> Node:
    fake = Node()
    monkeypatch.setattr(ssh, "run", fake.run)
    return fake


def counter(keep: bool = True) -> Fact[int]:
    return Fact("echo N", lambda out: int(out), keep=lambda _: keep)


def test_reads_in_a_refresh_share_one_answer_per_node_and_question(node: Node) -> None:
    with shared.answering_once():
        first, again = gather(SPARK_1, counter()), gather(SPARK_1, counter())
        other = gather(SPARK_2, counter())
    assert (first, again, other) == (1, 1, 2)
    assert node.asked == [("spark-1", "echo N"), ("spark-2", "echo N")]


def test_a_read_outside_a_refresh_asks_and_forgets_the_node(node: Node) -> None:
    with shared.answering_once():
        gather(SPARK_1, counter())
    assert gather(SPARK_1, counter()) == 2  # an apply's read-back: the node itself
    with shared.answering_once():
        assert gather(SPARK_1, counter()) == 3  # what was kept before it is gone


def test_an_answer_not_worth_keeping_is_asked_again(node: Node) -> None:
    with shared.answering_once():
        assert [gather(SPARK_1, counter(keep=False)) for _ in range(2)] == [1, 2]


def test_a_failed_question_is_not_kept(node: Node) -> None:
    node.fail = True
    with shared.answering_once(), pytest.raises(SshError):
        gather(SPARK_1, counter())
    node.fail = False
    with shared.answering_once():
        assert gather(SPARK_1, counter()) == 2


def test_an_answer_is_kept_only_for_a_moment(node: Node, monkeypatch: pytest.MonkeyPatch) -> None:
    with shared.answering_once():
        gather(SPARK_1, counter())
        now = time.monotonic() + shared.SHARED_FOR_S + 1
        monkeypatch.setattr(time, "monotonic", lambda: now)
        assert gather(SPARK_1, counter()) == 2


def test_threads_asking_at_once_wait_for_one_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    slow = Node(pause_s=0.2)
    monkeypatch.setattr(ssh, "run", slow.run)
    answers: list[int] = []

    def read() -> None:
        with shared.answering_once():
            answers.append(gather(SPARK_1, counter()))

    threads = [threading.Thread(target=read) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert (answers, len(slow.asked)) == ([1, 1, 1, 1], 1)


def test_with_the_speedups_off_every_read_asks_its_node(
    node: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(speedups.VARIABLE, "off")
    with shared.answering_once():
        assert not shared.sharing()
        assert [gather(SPARK_1, counter()) for _ in range(2)] == [1, 2]
    assert node.asked == [("spark-1", "echo N")] * 2


def test_with_the_speedups_off_no_read_is_recorded_or_trusted(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    monkeypatch.setattr(read_once, "directory", lambda: tmp_path)
    monkeypatch.setattr(read_once, "engine_run", lambda: "1-1")
    monkeypatch.setenv(speedups.VARIABLE, "off")
    read_once.confirm("a-resource")
    assert not read_once.confirmed("a-resource")
    assert not list(tmp_path.iterdir())
    monkeypatch.delenv(speedups.VARIABLE)
    read_once.confirm("a-resource")
    assert read_once.confirmed("a-resource")

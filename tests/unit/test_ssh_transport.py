"""The SSH transport's contract that needs no node: errors name node and address, sudo quoting."""

from __future__ import annotations

import dataclasses
import shlex
import threading
from pathlib import Path
from typing import Any

import pytest

from sparkrack import ssh
from sparkrack.ssh import Result, SshError, Target

pytestmark = pytest.mark.unit

SPARK_2 = Target("spark-2", "198.18.0.12", 22, "sparkrack", "/keys/id", "/keys/known_hosts")


def test_a_failed_command_names_node_address_and_stderr() -> None:
    error = ssh.command_failed(SPARK_2, "false", Result("", "boom\n", 3))
    assert str(error) == "node spark-2 (198.18.0.12): `false` exited 3: boom"


def test_a_missing_known_hosts_is_refused_before_connecting() -> None:
    with pytest.raises(
        SshError, match=r"^node spark-2 \(198\.18\.0\.12\): cannot read known_hosts"
    ):
        ssh.pinned_client(SPARK_2)


def test_unknown_hosts_are_rejected_not_added(tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    known.write_text("")
    client = ssh.pinned_client(Target("n", "h", 22, "u", "/k", str(known)))
    assert type(client._policy).__name__ == "RejectPolicy"


def test_sudo_runs_the_whole_line_as_root_quoted() -> None:
    command = "cat > '/etc/a b' && echo \"$tmp\""
    assert shlex.split(ssh.sudo_wrap(command)) == ["sudo", "-n", "--", "sh", "-c", command]


def test_connection_facts_round_trip_without_the_node_name() -> None:
    props = SPARK_2.connection_props()
    assert "node" not in props and set(props) == {"host", "port", "user", "key_path", "known_hosts"}
    assert Target.from_props("spark-2", props) == SPARK_2


def test_fan_out_reports_every_node_and_never_stops_at_the_first_failure(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def fake_run(target: Target, command: str, **_: object) -> Result:
        if target.node == "spark-1":
            raise SshError(f"{target.where()}: unreachable on port 22")
        return Result(target.node, "", 0)

    monkeypatch.setattr(ssh, "run", fake_run)
    nodes = [Target(f"spark-{i}", f"10.0.0.{i}", 22, "u", "/k", "/kh") for i in (1, 2, 3)]
    group = ssh.run_all(nodes, "hostname")
    assert not group.ok
    assert sorted(group.results) == ["spark-2", "spark-3"]
    assert str(group.failures["spark-1"]) == "node spark-1 (10.0.0.1): unreachable on port 22"


def test_a_node_that_did_not_answer_is_refused_at_once_for_a_while(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = [1000.0]
    attempts: list[str] = []

    def unreachable(target: Target) -> Any:
        attempts.append(target.node)
        message = f"{target.where()}: unreachable on port 22: timed out"
        raise ssh.Unreachable(message) from TimeoutError("timed out")

    monkeypatch.setattr(ssh, "open_connection", unreachable)
    pool = ssh.Pool(clock=lambda: now[0])
    for _ in range(3):
        with pytest.raises(ssh.Unreachable, match=r"node spark-2 .*unreachable on port 22"):
            pool.connection(SPARK_2)
    assert attempts == ["spark-2"]  # the 30 s of attempts paid once, not by every resource
    now[0] += ssh.UNREACHABLE_MEMORY_S
    with pytest.raises(ssh.Unreachable):
        pool.connection(SPARK_2)
    assert attempts == ["spark-2", "spark-2"]  # tried again once the window passed


def test_a_refused_connection_is_tried_again_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    attempts: list[str] = []

    def refused(target: Target) -> Any:
        attempts.append(target.node)
        raise ssh.Unreachable(f"{target.where()}: refused") from ConnectionRefusedError()

    monkeypatch.setattr(ssh, "open_connection", refused)
    pool = ssh.Pool()
    for _ in range(2):
        with pytest.raises(ssh.Unreachable):
            pool.connection(SPARK_2)
    assert attempts == ["spark-2", "spark-2"]  # sshd restarting: nothing to wait out


def test_a_node_that_does_not_answer_holds_up_only_its_own_callers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    spark_1 = dataclasses.replace(SPARK_2, node="spark-1", host="198.18.0.11")
    connecting, other_served = threading.Event(), threading.Event()

    def open_connection(target: Target) -> Any:
        if target.node == "spark-2":
            connecting.set()
            assert other_served.wait(5), "spark-1 waited for spark-2's connect"
            raise ssh.Unreachable(f"{target.where()}: timed out")
        return FakeConnection()

    monkeypatch.setattr(ssh, "open_connection", open_connection)
    pool = ssh.Pool()
    refused: list[ssh.Unreachable] = []

    def connect_to_spark_2() -> None:
        try:
            pool.connection(SPARK_2)
        except ssh.Unreachable as error:
            refused.append(error)

    slow = threading.Thread(target=connect_to_spark_2)
    slow.start()
    assert connecting.wait(5)
    pool.connection(spark_1)
    other_served.set()
    slow.join(5)
    assert len(refused) == 1


class FakeConnection:
    is_connected = True

    def close(self) -> None:
        return None

"""The SSH transport's contract that needs no node: errors name node and address, sudo quoting."""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import shlex
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import paramiko
import pytest

from sparkrack.transport import ssh
from sparkrack.transport.target import (
    HostKeyRefused,
    Result,
    SshError,
    Target,
    Unreachable,
    command_failed,
    sudo_wrap,
)

pytestmark = pytest.mark.unit

SPARK_2 = Target("spark-2", "198.18.0.12", 22, "sparkrack", "/keys/id", "/keys/known_hosts")


def test_a_failed_command_names_node_address_and_stderr() -> None:
    error = command_failed(SPARK_2, "false", Result("", "boom\n", 3))
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
    assert shlex.split(sudo_wrap(command)) == ["sudo", "-n", "--", "sh", "-c", command]


def test_connection_facts_round_trip_without_the_node_name() -> None:
    props = SPARK_2.connection_props()
    assert "node" not in props and set(props) == {"host", "port", "user", "key_path", "known_hosts"}
    assert Target.from_props("spark-2", props) == SPARK_2


def test_fan_out_reports_every_node_and_never_stops_at_the_first_failure() -> None:
    def hostname(target: Target) -> str:
        if target.node == "spark-1":
            raise SshError(f"{target.where()}: unreachable on port 22")
        return target.node

    nodes = [Target(f"spark-{i}", f"10.0.0.{i}", 22, "u", "/k", "/kh") for i in (1, 2, 3)]
    outcomes = ssh.on_each(nodes, hostname)
    assert list(outcomes) == ["spark-1", "spark-2", "spark-3"]
    assert (outcomes["spark-2"], outcomes["spark-3"]) == ("spark-2", "spark-3")
    assert str(outcomes["spark-1"]) == "node spark-1 (10.0.0.1): unreachable on port 22"


def test_a_node_that_did_not_answer_is_refused_at_once_for_a_while(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = [1000.0]
    attempts: list[str] = []

    def unreachable(target: Target) -> Any:
        attempts.append(target.node)
        message = f"{target.where()}: unreachable on port 22: timed out"
        raise Unreachable(message) from TimeoutError("timed out")

    monkeypatch.setattr(ssh, "open_connection", unreachable)
    pool = ssh.Pool(clock=lambda: now[0])
    for _ in range(3):
        with pytest.raises(Unreachable, match=r"node spark-2 .*unreachable on port 22"):
            pool.connection(SPARK_2)
    assert attempts == ["spark-2"]  # the 30 s of attempts paid once, not by every resource
    now[0] += ssh.UNREACHABLE_MEMORY_S
    with pytest.raises(Unreachable):
        pool.connection(SPARK_2)
    assert attempts == ["spark-2", "spark-2"]  # tried again once the window passed


def test_a_node_no_host_answers_for_is_refused_at_once_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stopped node on the same segment: ARP gets no reply, connect says "No route to host"."""
    attempts: list[str] = []

    def no_route(target: Target) -> Any:
        attempts.append(target.node)
        # What paramiko raises: each address's error gathered, no errno of its own.
        no_route = OSError(errno.EHOSTUNREACH, "No route to host")
        no_host = paramiko.ssh_exception.NoValidConnectionsError({(target.host, 22): no_route})
        raise Unreachable(f"{target.where()}: unreachable on port 22: {no_route}") from no_host

    monkeypatch.setattr(ssh, "open_connection", no_route)
    pool = ssh.Pool()
    for _ in range(3):
        with pytest.raises(Unreachable, match="No route to host"):
            pool.connection(SPARK_2)
    assert attempts == ["spark-2"]


def test_a_refused_connection_is_tried_again_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    attempts: list[str] = []

    def refused(target: Target) -> Any:
        attempts.append(target.node)
        raise Unreachable(f"{target.where()}: refused") from ConnectionRefusedError()

    monkeypatch.setattr(ssh, "open_connection", refused)
    pool = ssh.Pool()
    for _ in range(2):
        with pytest.raises(Unreachable):
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
            raise Unreachable(f"{target.where()}: timed out")
        return FakeConnection()

    monkeypatch.setattr(ssh, "open_connection", open_connection)
    pool = ssh.Pool()
    refused: list[Unreachable] = []

    def connect_to_spark_2() -> None:
        try:
            pool.connection(SPARK_2)
        except Unreachable as error:
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


class HostKeyServer:
    """An SSH server on loopback that shows its host key and no more (paramiko's server side),
    counting the connections it was offered."""

    def __init__(self) -> None:
        self.key = paramiko.ECDSAKey.generate()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.connections = 0
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self) -> None:
        while True:
            try:
                sock, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            transport = paramiko.Transport(sock)
            transport.add_server_key(self.key)
            with contextlib.suppress(Exception):
                transport.start_server(server=paramiko.ServerInterface())


@pytest.fixture
def server() -> Iterator[HostKeyServer]:
    served = HostKeyServer()
    yield served
    served.listener.close()


def pinned(tmp_path: Path, server: HostKeyServer, key: paramiko.PKey) -> Target:
    known = tmp_path / "known_hosts"
    known.write_text(f"[127.0.0.1]:{server.port} {key.get_name()} {key.get_base64()}\n")
    return Target("spark-2", "127.0.0.1", server.port, "sparkrack", "/no/key", str(known))


def test_a_changed_host_key_is_one_line_with_both_fingerprints(
    tmp_path: Path, server: HostKeyServer
) -> None:
    other = paramiko.ECDSAKey.generate()
    target = pinned(tmp_path, server, other)
    with pytest.raises(HostKeyRefused) as refused:
        ssh.open_connection(target)
    message = str(refused.value)
    assert message.startswith("node spark-2 (127.0.0.1): host key mismatch: it offers ")
    assert ssh.fingerprint(server.key) in message and ssh.fingerprint(other) in message
    assert "\n" not in message


def test_a_refused_node_is_not_asked_again_by_the_pool(
    tmp_path: Path, server: HostKeyServer
) -> None:
    target = pinned(tmp_path, server, paramiko.ECDSAKey.generate())
    pool = ssh.Pool()
    for _ in range(3):
        with pytest.raises(HostKeyRefused, match="host key mismatch"):
            pool.connection(target)
    assert server.connections == 1


def test_the_fingerprint_reads_as_openssh_prints_it(tmp_path: Path) -> None:
    key = paramiko.ECDSAKey.generate()
    (tmp_path / "key.pub").write_text(f"{key.get_name()} {key.get_base64()}\n")
    shown = subprocess.run(
        ["ssh-keygen", "-l", "-f", str(tmp_path / "key.pub")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert ssh.fingerprint(key) == f"{key.get_name()} {shown[1]}"


def test_only_a_pinned_node_is_asked_by_the_program(tmp_path: Path) -> None:
    key = paramiko.ECDSAKey.generate()
    known = tmp_path / "known_hosts"
    known.write_text(f"[127.0.0.1]:2222 {key.get_name()} {key.get_base64()}\n")
    pinned_node = Target("a", "127.0.0.1", 2222, "u", "/k", str(known))
    assert ssh.is_pinned(pinned_node)
    assert not ssh.is_pinned(dataclasses.replace(pinned_node, port=22))
    assert not ssh.is_pinned(dataclasses.replace(pinned_node, known_hosts=str(tmp_path / "no")))
    # a design stack's placeholder addresses, never pinned here: not one connection is tried
    nowhere = Target("spark-01", "192.0.2.11", 22, "u", "/k", str(known))
    assert ssh.unavailable([nowhere], only_pinned=True) == {}


def test_a_connection_closed_before_ssh_is_unreachable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def closed(conn: object) -> None:
        raise EOFError()

    (tmp_path / "known_hosts").write_text("")
    monkeypatch.setattr(ssh, "open_with_retries", closed)
    target = dataclasses.replace(SPARK_2, known_hosts=str(tmp_path / "known_hosts"))
    with pytest.raises(Unreachable, match=r"^node spark-2 \(198\.18\.0\.12\): unreachable"):
        ssh.open_connection(target)


class RefusingSessions:
    """A connection whose node refuses `refusals` sessions (MaxSessions), then runs the command."""

    def __init__(self, refusals: int) -> None:
        self.refusals = refusals
        self.asked = 0

    def run(self, line: str, **_: Any) -> str:
        self.asked += 1
        if self.asked <= self.refusals:
            raise paramiko.ChannelException(2, "open failed")
        return f"ran {line}"


@pytest.fixture
def quick_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ssh, "SESSION_RETRY_S", 0.0)


def test_a_refused_session_is_asked_again_on_the_same_connection(quick_retries: None) -> None:
    target = Target("spark-1", "198.18.0.11", 22, "sparkrack", "/k", "/kh")
    conn = RefusingSessions(refusals=ssh.SESSION_ATTEMPTS - 1)
    assert ssh.run_in_session(conn, target, "true", None, 5) == "ran true"
    assert conn.asked == ssh.SESSION_ATTEMPTS


def test_sessions_refused_every_time_are_an_error(quick_retries: None) -> None:
    target = Target("spark-1", "198.18.0.11", 22, "sparkrack", "/k", "/kh")
    conn = RefusingSessions(refusals=ssh.SESSION_ATTEMPTS)
    with pytest.raises(paramiko.ChannelException):
        ssh.run_in_session(conn, target, "true", None, 5)


class RefusingWithoutReason(RefusingSessions):
    """A refusal another thread's open took the reason of: paramiko's bare SSHException."""

    def run(self, line: str, **_: Any) -> str:
        self.asked += 1
        if self.asked <= self.refusals:
            raise paramiko.SSHException("Unable to open channel.")
        return f"ran {line}"


def test_a_refusal_without_its_reason_is_asked_again_too(quick_retries: None) -> None:
    target = Target("spark-1", "198.18.0.11", 22, "sparkrack", "/k", "/kh")
    conn = RefusingWithoutReason(refusals=ssh.SESSION_ATTEMPTS - 1)
    assert ssh.run_in_session(conn, target, "true", None, 5) == "ran true"


def test_a_dead_transport_is_not_asked_again(quick_retries: None) -> None:
    class Dead(RefusingSessions):
        def run(self, line: str, **_: Any) -> str:
            self.asked += 1
            raise paramiko.SSHException("SSH session not active")

    target = Target("spark-1", "198.18.0.11", 22, "sparkrack", "/k", "/kh")
    conn = Dead(refusals=0)
    with pytest.raises(paramiko.SSHException, match="not active"):
        ssh.run_in_session(conn, target, "true", None, 5)
    assert conn.asked == 1

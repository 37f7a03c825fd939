"""Every way a node's SSH can fail, as `sparkrack verify` and `up` meet it: one line per node with
the word for what failed (unreachable, refused, not SSH, authentication, host key), and no
library traceback on stderr. The nodes are listeners on 127.0.0.1 only: one that speaks no SSH,
a closed port, and paramiko's server side, which refuses every login."""

from __future__ import annotations

import contextlib
import dataclasses
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import paramiko
import pytest

from sparkrack.transport import ssh
from sparkrack.transport.ssh import known_hosts_name
from sparkrack.transport.target import HostKeyRefused, LoginRefused, SshError, Target, Unreachable
from sparkrack.verify.runner import unavailable_result
from sparkrack.verify.table import failures

pytestmark = pytest.mark.unit

LOOPBACK = "127.0.0.1"


@contextlib.contextmanager
def listening(serve: object) -> Iterator[int]:
    """A listener on 127.0.0.1 whose every connection `serve(sock)` handles; yields its port."""
    listener = socket.create_server((LOOPBACK, 0))

    def accept() -> None:
        while True:
            try:
                sock, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(sock,), daemon=True).start()  # type: ignore[arg-type]

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield listener.getsockname()[1]
    finally:
        listener.shutdown(socket.SHUT_RDWR)  # wakes the accept() before the close
        listener.close()


def speaks_http(sock: socket.socket) -> None:
    with sock:
        sock.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")


class RefusesEveryLogin(paramiko.ServerInterface):  # type: ignore[misc]
    def get_allowed_auths(self, username: str) -> str:
        return "publickey"

    def check_auth_publickey(self, username: str, key: paramiko.PKey) -> int:
        return int(paramiko.AUTH_FAILED)


HOST_KEY = paramiko.ECDSAKey.generate()
OTHER_KEY = paramiko.ECDSAKey.generate()


def speaks_ssh(sock: socket.socket) -> None:
    transport = paramiko.Transport(sock)
    transport.add_server_key(HOST_KEY)
    with contextlib.suppress(Exception):
        transport.start_server(server=RefusesEveryLogin())
        transport.join(10)
    transport.close()


def closed_port() -> int:
    probe = socket.create_server((LOOPBACK, 0))
    port: int = probe.getsockname()[1]
    probe.close()
    return port


@pytest.fixture
def files(tmp_path: Path) -> Path:
    key = paramiko.ECDSAKey.generate()
    key.write_private_key_file(str(tmp_path / "id"))
    (tmp_path / "known_hosts").write_text("")
    (tmp_path / "garbage").write_text("not a key\n")
    return tmp_path


def target(files: Path, port: int, **changes: str) -> Target:
    fields = {"key_path": str(files / "id"), "known_hosts": str(files / "known_hosts")} | changes
    return Target("spark-2", LOOPBACK, port, "ops", fields["key_path"], fields["known_hosts"])


def pin(node: Target, key: paramiko.PKey) -> None:
    line = f"{known_hosts_name(node)} {key.get_name()} {key.get_base64()}\n"
    Path(node.known_hosts).write_text(line)


def failure(node: Target) -> SshError:
    """What `verify` and `up` ask first of every node: its one connection, or why not."""
    ssh.close_all()
    [error] = ssh.unavailable([node]).values()
    return error


def test_a_port_that_speaks_no_ssh_is_said_so_without_a_traceback(
    files: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    with listening(speaks_http) as port:
        error = failure(target(files, port))
    assert isinstance(error, Unreachable)
    assert str(error).startswith(
        f"node spark-2 (127.0.0.1): not SSH: port {port} accepts connections but speaks no SSH"
        " (Error reading SSH protocol banner"
    )
    assert capfd.readouterr().err == ""


def test_a_closed_port_is_refused(files: Path, capfd: pytest.CaptureFixture[str]) -> None:
    port = closed_port()
    error = failure(target(files, port))
    assert str(error).startswith(f"node spark-2 (127.0.0.1): refused on port {port}: ")
    assert capfd.readouterr().err == ""


def test_a_host_key_not_pinned_is_a_host_key_refusal(
    files: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    with listening(speaks_ssh) as port:
        error = failure(target(files, port))
    assert isinstance(error, HostKeyRefused)
    assert "host key not pinned in" in str(error)
    assert capfd.readouterr().err == ""


def test_another_host_key_is_a_mismatch(files: Path, capfd: pytest.CaptureFixture[str]) -> None:
    with listening(speaks_ssh) as port:
        node = target(files, port)
        pin(node, OTHER_KEY)
        error = failure(node)
    assert isinstance(error, HostKeyRefused)
    assert "host key mismatch: it offers ecdsa-sha2-nistp256 SHA256:" in str(error)
    assert capfd.readouterr().err == ""


@pytest.mark.parametrize(
    ("key", "says"),
    [
        ("id", "authentication as ops with {key} failed: "),
        (".", "authentication: cannot use key file {key}: Is a directory"),
        ("missing", "authentication: cannot use key file {key}: No such file or directory"),
        ("garbage", "authentication: cannot use key file {key}: "),
    ],
    ids=["refused-login", "key-a-directory", "key-missing", "key-not-a-key"],
)
def test_a_login_that_fails_is_an_authentication_failure(
    key: str, says: str, files: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    path = str(files / key)
    with listening(speaks_ssh) as port:
        node = target(files, port, key_path=path)
        pin(node, HOST_KEY)
        error = failure(node)
    assert str(error).startswith(f"node spark-2 (127.0.0.1): {says.format(key=path)}"), error
    # the node is there: a delete that meets it keeps its state (only Unreachable drops it)
    assert isinstance(error, LoginRefused) and not isinstance(error, Unreachable)
    assert "unreachable" not in str(error)
    assert capfd.readouterr().err == ""


@pytest.mark.parametrize(
    ("error", "word"),
    [
        (TimeoutError("timed out"), "unreachable on port 22: timed out"),
        (OSError(113, "No route to host"), "unreachable on port 22: [Errno 113] No route to host"),
        (socket.gaierror(-2, "Name or service not known"), "unreachable on port 22: "),
        (EOFError(), "unreachable on port 22: EOFError"),
        (ConnectionRefusedError(111, "Connection refused"), "refused on port 22: "),
    ],
)
def test_a_node_that_does_not_answer_is_unreachable(error: BaseException, word: str) -> None:
    node = Target("spark-2", "198.18.0.12", 22, "ops", "/k", "/kh")
    said = str(ssh.connect_failure(node, error, spoke=False))
    assert said.startswith(f"node spark-2 (198.18.0.12): {word}"), said


def test_verify_gives_each_failed_node_one_line(files: Path) -> None:
    with listening(speaks_http) as port:
        first = target(files, port)
        second = dataclasses.replace(first, node="spark-3", port=closed_port())
        ssh.close_all()
        unusable = ssh.unavailable([first, second])
    results = [unavailable_result(node, str(why)) for node, why in unusable.items()]
    lines = failures(results)
    assert len(lines) == 2
    assert any("spark-2" in line and "not SSH" in line for line in lines), lines
    assert any("spark-3" in line and "refused on port" in line for line in lines), lines

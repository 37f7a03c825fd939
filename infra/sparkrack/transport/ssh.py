"""One pooled SSH transport (fabric over paramiko) with pinned host keys.

A node's host key must already be in the known_hosts file the stack names: an unknown or changed
key is refused, never added. Commands are strings built with `shlex.quote`/`shlex.join` by the
caller (facts and resources); `run` adds sudo and stdin, and every error names the node and its
address so a failure in a 16-node run says where it happened. Who is reached, what a command
returns and the errors are `target.py`'s; this module is the connection.

The pool is per process: Pulumi's dynamic-provider host calls resources from a few threads, and
they share one connection per node.
"""

from __future__ import annotations

import base64
import errno
import hashlib
import io
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import fabric
import paramiko
from invoke.exceptions import CommandTimedOut

from sparkrack.transport.target import (
    HostKeyRefused,
    LoginRefused,
    Result,
    SshError,
    Target,
    Unreachable,
    command_failed,
    sudo_wrap,
)

T = TypeVar("T")

# paramiko's transport thread logs a failed handshake with its traceback at ERROR, and with no
# handler configured Python's last resort prints it on stderr: two tracebacks per node before
# the one line `verify` and `up` give it. The error itself reaches the caller (connect_failure).
logging.getLogger("paramiko").addHandler(logging.NullHandler())
logging.getLogger("paramiko").propagate = False


CONNECT_TIMEOUT_S = 10
# A connect that times out is tried again: a loaded host (the 2-core CI machine running a sim)
# was measured to miss one 10 s window to a live node. A refused or unroutable node fails at once.
CONNECT_ATTEMPTS = 3
COMMAND_TIMEOUT_S = 300
FAN_OUT_WORKERS = 16
# Commands in flight on one connection at most: OpenSSH refuses a session beyond its MaxSessions
# (10 by default, and a session that just ended still counts for a moment), and the provider host
# now serves as many operations as --parallel allows.
SESSIONS_PER_NODE = 6
SESSION_ATTEMPTS = 5
SESSION_RETRY_S = 0.5
# A node that does not answer (every connect attempt timed out, or no host has its address: ARP
# got no reply, "No route to host" after 3 s) is answered from memory for this long: each of its
# resources would otherwise wait again, one after another (a stopped node held a sim-2 `up` for
# four minutes, then 133 s on "No route to host"). A refusal (sshd restarting) costs nothing to
# retry and is not remembered; a node back within the window is reached once it has passed.
UNREACHABLE_MEMORY_S = 120.0
NOT_ANSWERING = frozenset({errno.EHOSTUNREACH, errno.EHOSTDOWN, errno.ENETUNREACH})


def sha256_fingerprint(key: paramiko.PKey) -> str:
    """As `ssh-keygen -lf` prints it: `SHA256:<base64 of the key's SHA-256, unpadded>`."""
    digest = base64.b64encode(hashlib.sha256(key.asbytes()).digest()).decode().rstrip("=")
    return f"SHA256:{digest}"


def fingerprint(key: paramiko.PKey) -> str:
    """OpenSSH's form with the key type: `ssh-ed25519 SHA256:...`."""
    return f"{key.get_name()} {sha256_fingerprint(key)}"


def not_answering(cause: BaseException | None) -> bool:
    """A connect failure that says no host is there to answer (as opposed to sshd refusing).
    paramiko gathers each address's error in a NoValidConnectionsError, whose own errno is None."""
    if isinstance(cause, paramiko.ssh_exception.NoValidConnectionsError):
        return all(not_answering(error) for error in cause.errors.values())
    if isinstance(cause, TimeoutError):
        return True
    return isinstance(cause, OSError) and cause.errno in NOT_ANSWERING


class Pool:
    """One open fabric Connection per target, reopened when the node dropped it. Each target has
    its own lock, so a node that does not answer holds up only its own callers; one that did not
    answer (not_answering) is refused at once for UNREACHABLE_MEMORY_S, and one whose host key
    was refused for as long as the pool lives."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._lock = threading.Lock()  # guards the dicts; never held while connecting
        self._target_locks: dict[Target, threading.Lock] = {}
        self._sessions: dict[Target, threading.BoundedSemaphore] = {}
        self._connections: dict[Target, fabric.Connection] = {}
        self._unreachable: dict[Target, tuple[float, Unreachable]] = {}
        self._refused: dict[Target, HostKeyRefused] = {}  # kept until this process ends
        self._clock = clock

    def connection(self, target: Target) -> fabric.Connection:
        with self._target_lock(target):
            conn = self._connections.get(target)
            if conn is not None and conn.is_connected:
                return conn
            if conn is not None:
                conn.close()
            self._refuse_if_known_unusable(target)
            try:
                conn = open_connection(target)
            except Unreachable as error:
                if not_answering(error.__cause__):
                    self._unreachable[target] = (self._clock(), error)
                raise
            except HostKeyRefused as error:
                self._refused[target] = error
                raise
            self._unreachable.pop(target, None)
            self._connections[target] = conn
            return conn

    def _target_lock(self, target: Target) -> threading.Lock:
        with self._lock:
            return self._target_locks.setdefault(target, threading.Lock())

    def session(self, target: Target) -> threading.BoundedSemaphore:
        """Held while a command runs on the node's connection (SESSIONS_PER_NODE at a time)."""
        with self._lock:
            return self._sessions.setdefault(target, threading.BoundedSemaphore(SESSIONS_PER_NODE))

    def _refuse_if_known_unusable(self, target: Target) -> None:
        if target in self._refused:
            raise HostKeyRefused(str(self._refused[target]))
        seen = self._unreachable.get(target)
        if seen is not None and self._clock() - seen[0] < UNREACHABLE_MEMORY_S:
            ago = self._clock() - seen[0]
            raise Unreachable(f"{seen[1]} (found {ago:.0f}s ago, not tried again yet)")

    def drop(self, target: Target) -> None:
        with self._target_lock(target):
            conn = self._connections.pop(target, None)
        if conn is not None:
            conn.close()

    def close(self) -> None:
        with self._lock:
            conns, self._connections = list(self._connections.values()), {}
            self._unreachable.clear()
            self._refused.clear()
        for conn in conns:
            conn.close()


def pinned_client(target: Target) -> paramiko.SSHClient:
    """A client that knows only the stack's known_hosts and rejects everything else."""
    client = paramiko.SSHClient()
    try:
        client.load_host_keys(target.known_hosts)
    except OSError as error:
        message = f"cannot read known_hosts {target.known_hosts}: {error}"
        raise SshError(f"{target.where()}: {message}") from error
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    return client


def open_connection(target: Target) -> fabric.Connection:
    config = fabric.Config(overrides={"load_ssh_configs": False})
    conn = fabric.Connection(
        target.host,
        user=target.user,
        port=target.port,
        config=config,
        connect_timeout=CONNECT_TIMEOUT_S,
        connect_kwargs={
            "key_filename": [target.key_path],
            "look_for_keys": False,
            "allow_agent": False,
        },
    )
    conn.client = pinned_client(target)  # fabric's own client auto-adds unknown host keys
    try:
        open_with_retries(conn)
    except (paramiko.SSHException, OSError, EOFError, ValueError) as error:
        raise connect_failure(target, error, spoke_ssh(conn)) from error
    return conn


def key_file_problem(path: str) -> str | None:
    """Why the key file cannot be used, else None. Read again after a failed login: paramiko
    tries the file as each key type in turn and keeps the last type's complaint ("encountered
    EC key, expected OPENSSH key") in place of the node's refusal of a good key."""
    try:
        paramiko.PKey.from_path(path)
    except OSError as error:
        return error.strerror or type(error).__name__
    except (ValueError, paramiko.SSHException) as error:
        return " ".join(str(error).split()) or type(error).__name__
    return None


def spoke_ssh(conn: fabric.Connection) -> bool:
    """Whether the node answered with an SSH banner before the connection failed."""
    transport = conn.client.get_transport()
    return bool(transport is not None and transport.remote_version)


def connect_failure(target: Target, error: BaseException, spoke: bool) -> SshError:
    """A failed connection in one line with the word for what failed: unreachable, refused,
    not SSH, authentication, host key. Nothing was read or changed on the node."""
    where = target.where()
    if isinstance(error, paramiko.BadHostKeyException):
        message = (
            f"host key mismatch: it offers {fingerprint(error.key)}, {target.known_hosts} pins"
            f" {fingerprint(error.expected_key)}; refused, nothing read or changed there"
        )
        return HostKeyRefused(f"{where}: {message}")
    if isinstance(error, paramiko.SSHException) and "not found in known_hosts" in str(error):
        message = f"host key not pinned in {target.known_hosts}; refused, never added"
        return HostKeyRefused(f"{where}: {message}")
    if login := _login_failure(target, error, spoke):
        return LoginRefused(f"{where}: {login}")
    return Unreachable(f"{where}: {_no_session(target, error)}")


def _login_failure(target: Target, error: BaseException, spoke: bool) -> str | None:
    """Why the login failed, when it is the login (or the key file) that failed."""
    key_file = f"authentication: cannot use key file {target.key_path}"
    if isinstance(error, OSError) and error.filename is not None:  # the key file, read at login
        return f"{key_file}: {error.strerror}"
    if not spoke:
        return None
    if problem := key_file_problem(target.key_path):
        return f"{key_file}: {problem}"
    said = " ".join(str(error).split()) or type(error).__name__
    refusal = said if isinstance(error, paramiko.AuthenticationException) else "key refused"
    return f"authentication as {target.user} with {target.key_path} failed: {refusal}"


def _no_session(target: Target, error: BaseException) -> str:
    said = " ".join(str(error).split()) or type(error).__name__
    if isinstance(error, paramiko.SSHException):
        return f"not SSH: port {target.port} accepts connections but speaks no SSH ({said})"
    if refused(error):
        return f"refused on port {target.port}: nothing accepts connections there (is sshd up?)"
    return f"unreachable on port {target.port}: {said}"  # EOF: a stopping node closed at once


def refused(error: BaseException) -> bool:
    """The node's address answered and refused the port (no sshd listening)."""
    if isinstance(error, paramiko.ssh_exception.NoValidConnectionsError):
        return all(refused(cause) for cause in error.errors.values())
    return isinstance(error, ConnectionRefusedError) or (
        isinstance(error, OSError) and error.errno == errno.ECONNREFUSED
    )


def open_with_retries(conn: fabric.Connection) -> None:
    for attempt in range(1, CONNECT_ATTEMPTS + 1):
        try:
            conn.open()
            return
        except TimeoutError:
            if attempt == CONNECT_ATTEMPTS:
                raise


_POOL = Pool()


class WholeReads(io.StringIO):
    """stdin for invoke, which reads a non-terminal stream one byte per 10 ms (a 5 KB file took
    50 s): every read hands over all that is left."""

    def read(self, size: int | None = -1) -> str:
        return super().read()


# A benchmark's record of every command run (tests/bench/speed.py): where a refresh's time goes,
# and the commands its floor replays. Off unless the variable names a file to append to.
TRACE_ENV = "SPARKRACK_SSH_TRACE"


def trace(target: Target, command: str, started: float, ok: bool) -> None:
    path = os.environ.get(TRACE_ENV)
    if not path:
        return
    record = {"node": target.node, "command": command, "seconds": time.time() - started, "ok": ok}
    record["pid"] = os.getpid()  # which process asked: a preview's provider host, an update's
    with open(path, "a") as out:  # one short append per line: lines from threads do not mix
        out.write(json.dumps(record) + "\n")


def run(
    target: Target,
    command: str,
    *,
    sudo: bool = False,
    stdin: str | None = None,
    check: bool = True,
    timeout: int = COMMAND_TIMEOUT_S,
) -> Result:
    """Run a shell command line on the node; `check` raises SshError on a non-zero exit."""
    line = sudo_wrap(command) if sudo else command
    started = time.time()
    conn = _POOL.connection(target)
    try:
        done = run_in_session(conn, target, line, stdin, timeout)
    except CommandTimedOut as error:
        raise SshError(f"{target.where()}: `{command}` timed out after {timeout}s") from error
    except (paramiko.SSHException, OSError, EOFError) as error:
        _POOL.drop(target)  # a broken transport is not reused
        message = f"connection lost running `{command}`: {error}"
        raise Unreachable(f"{target.where()}: {message}") from error
    result = Result(stdout=done.stdout, stderr=done.stderr, exit_status=done.exited)
    trace(target, line, started, result.ok)
    if check and not result.ok:
        raise command_failed(target, command, result)
    return result


def run_in_session(
    conn: fabric.Connection, target: Target, line: str, stdin: str | None, timeout: int
) -> Any:
    """One command in a session of its own on the node's connection. sshd refuses a session
    beyond its MaxSessions, and counts one a moment after it ended: a refused session is waited
    for and asked again, and the connection, with the other commands on it, is kept."""
    for attempt in range(1, SESSION_ATTEMPTS + 1):
        try:
            with _POOL.session(target):
                return conn.run(
                    line,
                    hide=True,
                    warn=True,
                    in_stream=WholeReads(stdin) if stdin is not None else False,
                    timeout=timeout,
                )
        except paramiko.SSHException as error:
            if not session_refused(error) or attempt == SESSION_ATTEMPTS:
                raise
            time.sleep(SESSION_RETRY_S * attempt)
    raise AssertionError("unreachable: the last attempt returns or raises")


def session_refused(error: paramiko.SSHException) -> bool:
    """sshd refused a session. paramiko keeps the refusal on the transport, shared by every
    thread opening a session on it: another thread may take it, and this one's open then ends
    with only "Unable to open channel." (CI, sim-16: a first `up` failed on it). Both are the
    same refusal; a dead transport says otherwise ("SSH session not active")."""
    return isinstance(error, paramiko.ChannelException) or str(error) == OPEN_REFUSED


OPEN_REFUSED = "Unable to open channel."  # paramiko's Transport.open_channel, refusal not kept


def is_pinned(target: Target) -> bool:
    """Whether the stack's known_hosts pins the node's key: only then can sparkrack have reached
    it (and so have anything on it to refresh)."""
    try:
        keys = paramiko.HostKeys(target.known_hosts)
    except OSError:
        return False
    return keys.lookup(known_hosts_name(target)) is not None


def known_hosts_name(target: Target) -> str:
    """The node's name in known_hosts: its address, `[address]:port` off port 22 (OpenSSH's)."""
    return target.host if target.port == 22 else f"[{target.host}]:{target.port}"


def unavailable(targets: Iterable[Target], only_pinned: bool = False) -> dict[str, SshError]:
    """The nodes that cannot be used now (no answer, a host key not the pinned one), each with
    its one-line reason: one connection per node, all at once, kept open for what follows.
    `only_pinned` asks only the nodes whose key is pinned: nothing of sparkrack's can be on the
    others yet, so the program's preview of a fresh stack connects nowhere."""
    asked = [target for target in targets if is_pinned(target) or not only_pinned]
    outcomes = on_each(asked, _POOL.connection)
    return {node: error for node, error in outcomes.items() if isinstance(error, SshError)}


def on_each(targets: Iterable[Target], act: Callable[[Target], T]) -> dict[str, T | SshError]:
    """`act` on every node at once, node -> its outcome or the SshError it raised: one node's
    failure never stops the others (fabric's GroupResult)."""
    targets = list(targets)

    def one(target: Target) -> T | SshError:
        try:
            return act(target)
        except SshError as error:
            return error

    with ThreadPoolExecutor(max_workers=FAN_OUT_WORKERS) as pool:
        return dict(zip((t.node for t in targets), pool.map(one, targets), strict=True))


def close_all() -> None:
    _POOL.close()

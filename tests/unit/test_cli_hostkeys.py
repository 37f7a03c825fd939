"""`sparkrack hostkeys` against an SSH server on loopback: what a person sees, compares, accepts.

The server is OpenSSH's sshd when it can run here without touching the machine (installed, and
as root only where its privilege-separation user and /run/sshd exist; SPARKRACK_TEST_SSHD names
another binary); otherwise paramiko's server side, which does the same key exchange with the same
ssh-keygen host keys. The command never logs in, so either shows it all.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import socket
import stat
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import paramiko
import pytest
import yaml

from sparkrack.cli import main
from sparkrack.config.load import SPEC_KEY
from sparkrack.stackspec import base as spec_base

from .support import STACKS, cluster

pytestmark = pytest.mark.unit


@pytest.fixture(autouse=True)
def loopback_rack(monkeypatch: pytest.MonkeyPatch) -> None:
    """These racks are two loopback addresses of this machine, which no real stack may name (its
    `up` would configure this machine): that one refusal is lifted for these tests alone."""
    kinds = {kind: nets for kind, nets in spec_base.NOT_A_NODE.items() if kind != "loopback"}
    monkeypatch.setattr(spec_base, "NOT_A_NODE", kinds)


ADDRESSES = ("127.0.0.1", "127.0.0.2")  # both loopback: two nodes, one server
SSHD = Path(os.environ.get("SPARKRACK_TEST_SSHD", "/usr/sbin/sshd"))


def keygen(path: Path, kind: str = "ed25519") -> Path:
    """A host key as a node has one; the public half's path. ECDSA in PEM form: paramiko (the
    fallback server) misreads some OpenSSH-form ECDSA private keys."""
    form = ["-m", "PEM"] if kind == "ecdsa" else []
    subprocess.run(
        ["ssh-keygen", "-q", "-t", kind, *form, "-N", "", "-C", "", "-f", str(path)], check=True
    )
    return path.with_name(path.name + ".pub")


def console_fingerprint(public: Path) -> str:
    """What `ssh-keygen -lf` prints on the node's console: `256 SHA256:... (ED25519)`."""
    shown = subprocess.run(
        ["ssh-keygen", "-lf", str(public)], capture_output=True, text=True, check=True
    )
    return shown.stdout.split()[1]


def sshd_runs_here() -> bool:
    if not SSHD.is_file():
        return False
    if os.geteuid() != 0:
        return True
    # As root, sshd's pre-auth child drops to the `sshd` user in a chroot of /run/sshd.
    try:
        pwd.getpwnam("sshd")
    except KeyError:
        return False
    return Path("/run/sshd").is_dir()


class Sshd:
    """OpenSSH's sshd on both loopback addresses, on one free port, as the current user."""

    kind = "sshd"

    def __init__(self, tmp_path: Path, keys: list[Path]) -> None:
        self.port = free_port()
        config = tmp_path / "sshd_config"
        listen = "".join(f"ListenAddress {address}\n" for address in ADDRESSES)
        config.write_text(
            f"Port {self.port}\n{listen}PidFile none\nUsePAM no\nStrictModes no\n"
            "PasswordAuthentication no\nKbdInteractiveAuthentication no\n"
        )
        host_keys = [arg for key in keys for arg in ("-h", str(key))]
        self.process = subprocess.Popen(
            [str(SSHD.resolve()), "-D", "-e", "-f", str(config), *host_keys],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        wait_until_listening(self.port, self.process)

    def stop(self) -> None:
        self.process.kill()  # by its own PID, nothing else
        self.process.wait(10)
        if self.process.stderr is not None:
            self.process.stderr.close()


class KeyExchangeServer:
    """paramiko's server side on both loopback addresses: the key exchange and no more."""

    kind = "paramiko"

    def __init__(self, tmp_path: Path, keys: list[Path]) -> None:
        self.keys = [paramiko.PKey.from_path(key) for key in keys]
        self.listeners = listeners_on_one_port()
        self.port = self.listeners[0].getsockname()[1]
        for listener in self.listeners:
            threading.Thread(target=self.serve, args=(listener,), daemon=True).start()

    def serve(self, listener: socket.socket) -> None:
        while True:
            try:
                sock, _ = listener.accept()
            except OSError:
                return
            transport = paramiko.Transport(sock)
            for key in self.keys:
                transport.add_server_key(key)
            with contextlib.suppress(Exception):
                transport.start_server(server=paramiko.ServerInterface())

    def stop(self) -> None:
        for listener in self.listeners:
            listener.close()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind((ADDRESSES[0], 0))
        port: int = probe.getsockname()[1]
        return port


def listeners_on_one_port() -> list[socket.socket]:
    for _ in range(20):
        first = socket.create_server((ADDRESSES[0], 0))
        try:
            second = socket.create_server((ADDRESSES[1], first.getsockname()[1]))
        except OSError:
            first.close()
            continue
        return [first, second]
    raise RuntimeError("no port free on both loopback addresses")


def wait_until_listening(port: int, process: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if process.poll() is not None:
            error = process.stderr.read() if process.stderr else ""
            raise RuntimeError(f"sshd exited {process.returncode}: {error}")
        with contextlib.suppress(OSError), socket.create_connection((ADDRESSES[1], port), 1):
            return
        time.sleep(0.05)
    process.kill()
    raise RuntimeError(f"sshd did not listen on port {port} within 10 s")


Server = Sshd | KeyExchangeServer


def start_server(tmp_path: Path, keys: list[Path]) -> Server:
    return Sshd(tmp_path, keys) if sshd_runs_here() else KeyExchangeServer(tmp_path, keys)


@pytest.fixture
def host_key(tmp_path: Path) -> Path:
    (tmp_path / "node").mkdir()
    return keygen(tmp_path / "node" / "ssh_host_ed25519_key")


@pytest.fixture
def server(tmp_path: Path, host_key: Path) -> Iterator[Server]:
    served = start_server(tmp_path, [host_key.with_suffix("")])
    yield served
    served.stop()


class Rack:
    """A two-node stack on disk whose nodes are the loopback server (or a closed port)."""

    def __init__(self, tmp_path: Path, ports: tuple[int, int]) -> None:
        self.known_hosts = tmp_path / "keys" / "known_hosts"  # its folder does not exist yet
        self.stacks = tmp_path / "stacks"
        self.stacks.mkdir()
        self.ports = ports
        raw = cluster("sim-2")
        raw["ssh"]["known_hosts"] = str(self.known_hosts)
        for node, address, port in zip(raw["nodes"], ADDRESSES, ports, strict=True):
            node["address"] = address
            node["ssh"] = {"port": port}
        document = {"config": {SPEC_KEY: raw}}
        (self.stacks / "Pulumi.rack.yaml").write_text(yaml.safe_dump(document))

    def hostkeys(self, *args: str) -> int:
        return main(["hostkeys", "--stack", "rack", "--stacks-dir", str(self.stacks), *args])

    def name(self, node: int) -> str:
        return f"[{ADDRESSES[node]}]:{self.ports[node]}"

    def pin(self, node: int, public: Path) -> None:
        self.known_hosts.parent.mkdir(exist_ok=True)
        with self.known_hosts.open("a") as out:
            out.write(f"{self.name(node)} {' '.join(public.read_text().split()[:2])}\n")


def rows(out: str) -> dict[str, list[str]]:
    """The table's rows by node: address, key type, fingerprint, known."""
    lines = [line.split() for line in out.splitlines() if line.startswith("  spark-")]
    return {line[0]: line[1:] for line in lines}


def test_each_node_shows_its_key_as_ssh_keygen_prints_it(
    tmp_path: Path, server: Server, host_key: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rack = Rack(tmp_path, (server.port, server.port))

    assert rack.hostkeys() == 0

    out = capsys.readouterr().out
    print(f"({server.kind})\n{out}")
    shown = console_fingerprint(host_key)
    assert rows(out) == {
        "spark-1": [f"127.0.0.1:{server.port}", "ssh-ed25519", shown, "no"],
        "spark-2": [f"127.0.0.2:{server.port}", "ssh-ed25519", shown, "no"],
    }
    assert "ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub" in out
    assert "--accept --fingerprint spark-1=SHA256:... --fingerprint spark-2=SHA256:..." in out
    assert not rack.known_hosts.parent.exists()  # looking writes nothing


def test_a_pinned_key_reads_yes_hashed_names_too(
    tmp_path: Path, server: Server, host_key: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rack = Rack(tmp_path, (server.port, server.port))
    rack.pin(0, host_key)
    subprocess.run(
        ["ssh-keygen", "-H", "-f", str(rack.known_hosts)], check=True, capture_output=True
    )
    assert "127.0.0.1" not in rack.known_hosts.read_text()

    assert rack.hostkeys() == 0

    table = rows(capsys.readouterr().out)
    assert table["spark-1"][3] == "yes"
    assert table["spark-2"][3] == "no"


def test_another_key_pinned_is_shouted_exit_1_and_never_replaced(
    tmp_path: Path, server: Server, host_key: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rack = Rack(tmp_path, (server.port, server.port))
    rack.pin(0, keygen(tmp_path / "old_key"))
    before = rack.known_hosts.read_text()

    assert rack.hostkeys() == 1

    out, err = capsys.readouterr()
    assert rows(out)["spark-1"][3] == "DIFFERENT"
    assert "stack rack: node spark-1 (127.0.0.1): DIFFERENT HOST KEY: it offers ssh-ed25519" in err
    assert "man-in-the-middle" in err
    assert f"ssh-keygen -R '{rack.name(0)}' -f {rack.known_hosts}" in err

    shown = console_fingerprint(host_key)
    assert rack.hostkeys("--accept", "--fingerprint", f"spark-1={shown}") == 1
    err = capsys.readouterr().err
    assert "stack rack: node spark-1 (127.0.0.1): refused: known_hosts pins another key" in err
    assert err.rstrip().endswith("stack rack: nothing written")
    assert rack.known_hosts.read_text() == before


def test_accept_pins_the_fingerprints_typed_then_they_read_yes(
    tmp_path: Path, server: Server, host_key: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rack = Rack(tmp_path, (server.port, server.port))
    shown = console_fingerprint(host_key)
    typed = ["--fingerprint", f"spark-1={shown}", "--fingerprint", f"spark-2={shown}"]

    assert rack.hostkeys("--accept", *typed) == 0

    assert {row[3] for row in rows(capsys.readouterr().out).values()} == {"yes"}
    pinned = rack.known_hosts.read_text().splitlines()
    key = " ".join(host_key.read_text().split()[:2])
    assert pinned == [f"{rack.name(0)} {key}", f"{rack.name(1)} {key}"]
    assert stat.S_IMODE(rack.known_hosts.stat().st_mode) == 0o600
    assert stat.S_IMODE(rack.known_hosts.parent.stat().st_mode) == 0o700
    for node in (0, 1):  # OpenSSH finds each node under the name its client looks up
        found = subprocess.run(
            ["ssh-keygen", "-F", rack.name(node), "-f", str(rack.known_hosts)], capture_output=True
        )
        assert found.returncode == 0

    assert rack.hostkeys("--accept", *typed) == 0  # already pinned: nothing added
    assert rack.known_hosts.read_text().splitlines() == pinned
    assert rack.hostkeys() == 0
    assert {row[3] for row in rows(capsys.readouterr().out).values()} == {"yes"}


def test_a_fingerprint_not_the_offered_one_is_refused_and_nothing_written(
    tmp_path: Path, server: Server, host_key: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rack = Rack(tmp_path, (server.port, server.port))
    other = console_fingerprint(keygen(tmp_path / "other_key"))
    typed = ["--fingerprint", f"spark-1={console_fingerprint(host_key)}"]

    assert rack.hostkeys("--accept", *typed, "--fingerprint", f"spark-2={other}") == 1

    err = capsys.readouterr().err
    assert "stack rack: node spark-2 (127.0.0.2): refused: it offers ssh-ed25519" in err
    assert f"not the {other} given" in err
    assert err.rstrip().endswith("stack rack: nothing written")
    assert not rack.known_hosts.exists()  # not even spark-1's, whose fingerprint was right


def test_an_unreachable_node_is_named_and_exits_1(
    tmp_path: Path, server: Server, host_key: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    closed = free_port()
    rack = Rack(tmp_path, (server.port, closed))

    assert rack.hostkeys() == 1

    out, err = capsys.readouterr()
    table = rows(out)
    assert table["spark-1"][2:] == [console_fingerprint(host_key), "no"]
    assert table["spark-2"] == [f"127.0.0.2:{closed}", "-", "unreachable", "-"]
    assert f"stack rack: node spark-2 (127.0.0.2): unreachable on port {closed}" in err

    typed = f"spark-2={console_fingerprint(host_key)}"
    assert rack.hostkeys("--accept", "--fingerprint", typed) == 1
    err = capsys.readouterr().err
    assert "stack rack: node spark-2 (127.0.0.2): refused: it showed no key (see above)" in err
    assert err.rstrip().endswith("stack rack: nothing written")
    assert not rack.known_hosts.exists()


def test_the_pinned_key_type_is_the_one_asked_for(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "node").mkdir()
    ed25519 = keygen(tmp_path / "node" / "ssh_host_ed25519_key")
    ecdsa = keygen(tmp_path / "node" / "ssh_host_ecdsa_key", "ecdsa")
    served = start_server(tmp_path, [ed25519.with_suffix(""), ecdsa.with_suffix("")])
    try:
        rack = Rack(tmp_path, (served.port, served.port))
        rack.pin(0, ecdsa)

        assert rack.hostkeys("--json") == 0
    finally:
        served.stop()

    nodes = {row["node"]: row for row in json.loads(capsys.readouterr().out)["nodes"]}
    assert nodes["spark-1"]["key_type"] == "ecdsa-sha2-nistp256"
    assert nodes["spark-1"]["fingerprint"] == console_fingerprint(ecdsa)
    assert nodes["spark-1"]["known"] == "yes"
    assert nodes["spark-2"]["key_type"] == "ssh-ed25519"  # nothing pinned: the console's type
    assert nodes["spark-2"]["known"] == "no"
    assert nodes["spark-2"]["known_hosts"] == str(rack.known_hosts)
    assert nodes["spark-2"]["error"] is None


FINGERPRINT = "SHA256:" + "A" * 43


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--accept"], "--accept needs --fingerprint NODE=SHA256:... for each node"),
        (["--fingerprint", f"spark-1={FINGERPRINT}"], "--fingerprint is for --accept"),
        (["--accept", "--fingerprint", f"spark-9={FINGERPRINT}"], "no node 'spark-9'"),
        (["--accept", "--fingerprint", f"spark-1={FINGERPRINT}",
          "--fingerprint", f"spark-1={FINGERPRINT}"], "is given twice"),
        (["--accept", "--fingerprint", "spark-1=SHA256:short"], "expected NODE=SHA256:"),
        (["--accept", "--fingerprint", FINGERPRINT], "expected NODE=SHA256:"),
    ],
)  # fmt: skip
def test_bad_input_exits_2_before_any_connection(
    args: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # sim-2's nodes are not running here: a connection would show as unreachable, exit 1
    assert main(["hostkeys", "--stack", "sim-2", "--stacks-dir", str(STACKS), *args]) == 2
    err = capsys.readouterr().err
    assert says in err
    assert len(err.strip().splitlines()) == 1

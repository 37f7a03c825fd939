"""The simulator's stand-in ib_write_bw: refuses what perftest refuses on a port that is not ready,
moves its bytes through the device's own netdev (here loopback), and prints perftest's table,
marked SIMULATED, which verification's parser reads."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from sparkrack.facts.perftest import parse_write_bw
from sparkrack.sim import ib_write_bw

pytestmark = pytest.mark.unit


def port(root: Path, device: str, state: str, netdev: str | None) -> Path:
    ports = root / device / "ports" / "1"
    (ports / "gid_attrs" / "ndevs").mkdir(parents=True)
    (ports / "state").write_text(f"{state}\n")
    if netdev:
        (ports / "gid_attrs" / "ndevs" / "3").write_text(f"{netdev}\n")
    return root


@pytest.mark.parametrize(
    ("state", "netdev", "said"),
    [
        ("4: ACTIVE", None, "Failed to query GID at index 3 of rocep1s0f0"),
        ("1: DOWN", "lo", "Port number 1 state is Down"),
    ],
)
def test_a_port_perftest_could_not_use_is_refused(
    tmp_path: Path, state: str, netdev: str | None, said: str
) -> None:
    tree = port(tmp_path, "rocep1s0f0", state, netdev)
    with pytest.raises(SystemExit) as refused:
        ib_write_bw.port_netdev("rocep1s0f0", 3, tree)
    assert said in str(refused.value.code)
    with pytest.raises(SystemExit, match="Unable to find the Infiniband/RoCE device"):
        ib_write_bw.port_netdev("roceP2p1s0f0", 3, tree)


def test_a_write_through_the_ports_netdev_prints_a_table_verification_reads(
    tmp_path: Path,
) -> None:
    assert ib_write_bw.port_netdev("rocep1s0f0", 3, port(tmp_path, "rocep1s0f0", "4: ACTIVE", "lo"))
    args = ["-d", "rocep1s0f0", "-x", "3", "-p", "0", "-n", "50", "-s", "65536", "--report_gbits"]
    server_args = ib_write_bw.parse(args)
    with ib_write_bw.bound("lo", "127.0.0.1") as listener:  # a free port for the server
        listener.bind(("127.0.0.1", 0))
        server_args.port = listener.getsockname()[1]
    took: list[float] = []
    server = threading.Thread(
        target=lambda: took.append(ib_write_bw.serve("lo", "127.0.0.1", server_args))
    )
    server.start()
    client_args = ib_write_bw.parse([*args, "127.0.0.1"])
    client_args.port = server_args.port
    for _ in range(50):  # the server binds in its thread
        try:
            seconds = ib_write_bw.send("lo", "127.0.0.1", client_args)
            break
        except SystemExit:
            time.sleep(0.05)
    server.join(10)

    written = parse_write_bw(ib_write_bw.report(client_args, seconds))

    assert took and written.gbits is not None and written.gbits > 0
    assert written.simulated

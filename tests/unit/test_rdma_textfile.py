"""The RDMA textfile collector on a captured sysfs tree.

tests/unit/data/rdma_sysfs is one GB10 node's /sys/class/infiniband as the simulator writes it
(shaped like a ConnectX-7: four RoCE devices, port 1 each), with fixed counters and one port
DOWN: rocep1s0f0 carried 2,500,000,000 words out (10 GB, past 2^32 bytes) and 1,234,567 in;
rocep1s0f1 is DOWN; roceP2p1s0f0 carried 7 words out and 3 in.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from roles.monitoring.files import rdma_textfile
from roles.monitoring.files.rdma_textfile import (
    PortReading,
    TransportScanner,
    collect_once,
    port_is_active,
    read_ports,
    render,
)

pytestmark = pytest.mark.unit

SYSFS = Path(__file__).parent / "data" / "rdma_sysfs"
SAMPLE = re.compile(r'^(\w+)\{device="([^"]*)",port="([^"]*)",netdev="([^"]*)"\} (\d+)$')
IB_LINE = (
    "spark-1:52:52 [0] NCCL INFO NET/IB : Using [0]rocep1s0f0:1/RoCE [1]roceP2p1s0f0:1/RoCE "
    "[RO]; OOB enP7s7:198.18.0.11<0>\n"
)
SOCKET_LINES = (
    "spark-2:60:60 [0] NCCL INFO NET/IB : No device found.\n"
    "spark-2:60:60 [0] NCCL INFO NET/Socket : Using [0]enP7s7:198.18.0.12<0>\n"
)


def samples(text: str) -> dict[tuple[str, str], int]:
    """(metric, device) -> value, for every port sample in a textfile."""
    found = {}
    for line in text.splitlines():
        match = SAMPLE.match(line)
        if match:
            found[(match[1], match[2])] = int(match[5])
    return found


def test_every_device_and_port_is_read_with_its_netdev() -> None:
    readings = read_ports(SYSFS)
    assert [(r.device, r.port, r.netdev) for r in readings] == [
        ("roceP2p1s0f0", "1", "enP2p1s0f0np0"),
        ("roceP2p1s0f1", "1", "enP2p1s0f1np1"),
        ("rocep1s0f0", "1", "enp1s0f0np0"),
        ("rocep1s0f1", "1", "enp1s0f1np1"),
    ]


def test_bytes_are_words_times_four() -> None:
    text = render(read_ports(SYSFS), None)
    values = samples(text)
    assert values[("sparkrack_rdma_port_xmit_bytes_total", "rocep1s0f0")] == 10_000_000_000
    assert values[("sparkrack_rdma_port_rcv_bytes_total", "rocep1s0f0")] == 4_938_268
    assert values[("sparkrack_rdma_port_xmit_bytes_total", "roceP2p1s0f0")] == 28
    assert values[("sparkrack_rdma_port_rcv_bytes_total", "roceP2p1s0f0")] == 12


def test_a_down_port_reads_zero_and_active_ports_one() -> None:
    values = samples(render(read_ports(SYSFS), None))
    up = {device: v for (metric, device), v in values.items() if metric == "sparkrack_rdma_port_up"}
    assert up == {"rocep1s0f0": 1, "rocep1s0f1": 0, "roceP2p1s0f0": 1, "roceP2p1s0f1": 1}


@pytest.mark.parametrize(
    ("state", "up"),
    [
        ("4: ACTIVE", True),
        ("1: DOWN", False),
        ("2: INIT", False),
        ("3: ARMED", False),
        ("", False),
        (None, False),
        ("ACTIVE", True),
    ],
)
def test_only_active_is_up(state: str | None, up: bool) -> None:
    assert port_is_active(state) is up


def test_textfile_has_help_and_type_once_per_family() -> None:
    text = render(read_ports(SYSFS), None)
    assert text.count("# TYPE sparkrack_rdma_port_xmit_bytes_total counter") == 1
    assert text.count("# TYPE sparkrack_rdma_port_up gauge") == 1
    assert "sparkrack_nccl_socket_fallback" not in text  # no engine log known: absent


def test_unreadable_counter_is_left_out_not_zero() -> None:
    reading = PortReading("rocep1s0f0", "1", "enp1s0f0np0", True, None, 5)
    text = render([reading], None)
    assert "sparkrack_rdma_port_xmit_bytes_total{" not in text
    assert 'sparkrack_rdma_port_rcv_bytes_total{device="rocep1s0f0"' in text


def test_no_rdma_hardware_writes_an_empty_file(tmp_path: Path) -> None:
    output = tmp_path / "rdma.prom"
    collect_once(tmp_path / "missing", output, None)
    assert output.read_text() == ""


def test_write_is_atomic_and_leaves_no_temporary(tmp_path: Path) -> None:
    output = tmp_path / "rdma.prom"
    output.write_text("old\n")
    inode = output.stat().st_ino
    collect_once(SYSFS, output, None)
    assert output.stat().st_ino != inode  # replaced by rename, never rewritten in place
    assert [p.name for p in tmp_path.iterdir()] == ["rdma.prom"]
    assert "sparkrack_rdma_port_up" in output.read_text()


def test_ib_log_reads_zero_and_socket_log_reads_one(tmp_path: Path) -> None:
    log = tmp_path / "engine.log"
    log.write_text("INFO starting\n" + IB_LINE)
    scanner = TransportScanner(log)
    assert scanner.scan() == 0
    with log.open("a") as out:
        out.write(SOCKET_LINES)
    assert scanner.scan() == 1  # a later rank on sockets is a fallback


def test_no_device_found_alone_is_not_ib(tmp_path: Path) -> None:
    log = tmp_path / "engine.log"
    log.write_text("spark-2:60:60 [0] NCCL INFO NET/IB : No device found.\n")
    assert TransportScanner(log).scan() is None


def test_missing_log_leaves_the_metric_absent(tmp_path: Path) -> None:
    output = tmp_path / "rdma.prom"
    collect_once(SYSFS, output, TransportScanner(tmp_path / "missing.log"))
    assert "sparkrack_nccl_socket_fallback" not in output.read_text()


def test_truncated_log_is_read_again(tmp_path: Path) -> None:
    log = tmp_path / "engine.log"
    log.write_text("padding " * 100 + "\n" + SOCKET_LINES)
    scanner = TransportScanner(log)
    assert scanner.scan() == 1
    log.write_text(IB_LINE)  # rotated: a new engine run, on IB
    assert scanner.scan() == 0


def test_an_engine_restarted_into_the_same_log_starts_a_new_verdict(tmp_path: Path) -> None:
    # k8s-file logs append: the repaired engine's lines follow the fallback's in one file
    log = tmp_path / "engine.log"
    start = "2026-12-02T10:00:00Z stdout F INFO 12-02 10:00:00 [api_server.py:1] vLLM API server"
    log.write_text(f"{start} version 0.11.0\n{SOCKET_LINES}")
    scanner = TransportScanner(log)
    assert scanner.scan() == 1
    with log.open("a") as out:
        out.write(f"{start} version 0.11.0\n")
    assert scanner.scan() is None  # restarted, no transport line yet
    with log.open("a") as out:
        out.write(IB_LINE)
    assert scanner.scan() == 0


def test_line_split_across_reads_is_seen_whole(tmp_path: Path) -> None:
    log = tmp_path / "engine.log"
    log.write_text(IB_LINE[:30])
    scanner = TransportScanner(log)
    assert scanner.scan() is None
    with log.open("a") as out:
        out.write(IB_LINE[30:])
    assert scanner.scan() == 0


def test_command_line_once_writes_the_file(tmp_path: Path) -> None:
    output = tmp_path / "rdma.prom"
    log = tmp_path / "engine.log"
    log.write_text(SOCKET_LINES)
    argv = ["--sysfs", str(SYSFS), "--output", str(output), "--once", "--engine-log", str(log)]
    assert rdma_textfile.main(argv) == 0
    text = output.read_text()
    assert "sparkrack_nccl_socket_fallback 1" in text.splitlines()
    assert os.stat(output).st_mode & 0o777 == 0o644


def test_command_line_refuses_a_non_positive_interval(tmp_path: Path) -> None:
    with pytest.raises(SystemExit):
        rdma_textfile.parse_args(["--output", str(tmp_path / "x.prom"), "--interval", "0"])


def test_promtool_accepts_the_textfile(tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    assert promtool, "promtool is missing: install Debian's prometheus package"
    log = tmp_path / "engine.log"
    log.write_text(IB_LINE)
    text = render(read_ports(SYSFS), TransportScanner(log).scan())
    linted = subprocess.run(
        [promtool, "check", "metrics"], input=text, capture_output=True, text=True, check=False
    )
    assert linted.returncode == 0, linted.stdout + linted.stderr

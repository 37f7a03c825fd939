#!/usr/bin/env python3
"""RDMA port counters (and NCCL's transport) for node-exporter's textfile collector.

RoCE traffic bypasses the kernel's network stack, so `node_network_*` never sees it; the RDMA
device's own counters do. node-exporter's `infiniband` collector reads them too, but it is the
collector that hung node-exporter under RDMA load (seed 001), so sparkrack leaves it out and this
script reads only what the dashboards need, for every device and port:

    /sys/class/infiniband/<device>/ports/<n>/state                 "4: ACTIVE"
    /sys/class/infiniband/<device>/ports/<n>/counters/port_xmit_data  4-byte words
    /sys/class/infiniband/<device>/ports/<n>/counters/port_rcv_data   4-byte words
    /sys/class/infiniband/<device>/ports/<n>/gid_attrs/ndevs/0      the port's netdev

and writes, every --interval seconds, atomically (a temporary file renamed over the old one, so
node-exporter never reads half a file):

    sparkrack_rdma_port_xmit_bytes_total{device,port,netdev}  port_xmit_data x 4
    sparkrack_rdma_port_rcv_bytes_total{device,port,netdev}   port_rcv_data x 4
    sparkrack_rdma_port_up{device,port,netdev}                1 when the state is ACTIVE
    sparkrack_nccl_socket_fallback  with --engine-log: 1 when NCCL logged its socket transport
                                    (`NET/Socket`), 0 when it logged `NET/IB : Using` only,
                                    since the engine's last start; absent while the log shows
                                    neither (or does not exist)

Standard library only: it runs on the exporters image's python3.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

WORD_BYTES = 4  # port_xmit_data / port_rcv_data count 4-byte words
ACTIVE = "ACTIVE"
SOCKET_MARKERS = ("NET/Socket", "Using network Socket")
IB_MARKERS = ("NET/IB : Using", "Using network IB")
# vLLM's first line on every start (its api_server's run_server): an engine restarted into the
# same log starts a new verdict, so a repaired fallback stops reading 1.
ENGINE_START_MARKERS = ("vLLM API server version",)


@dataclass(frozen=True)
class PortReading:
    device: str
    port: str
    netdev: str
    up: bool
    xmit_words: int | None  # None: the counter could not be read
    rcv_words: int | None


def read_text(path: Path) -> str | None:
    """A sysfs attribute's value, or None when it is missing or unreadable (some attributes
    of a real device raise EINVAL when read, e.g. an unpopulated GID entry)."""
    try:
        return path.read_text().strip()
    except OSError:
        return None


def read_counter(path: Path) -> int | None:
    text = read_text(path)
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def port_is_active(state: str | None) -> bool:
    """`state` reads "4: ACTIVE" (number, then name); DOWN, INIT and ARMED are not up."""
    return state is not None and state.split(":")[-1].strip() == ACTIVE


def read_port(device: str, port_dir: Path) -> PortReading:
    counters = port_dir / "counters"
    return PortReading(
        device=device,
        port=port_dir.name,
        netdev=read_text(port_dir / "gid_attrs" / "ndevs" / "0") or "",
        up=port_is_active(read_text(port_dir / "state")),
        xmit_words=read_counter(counters / "port_xmit_data"),
        rcv_words=read_counter(counters / "port_rcv_data"),
    )


def read_ports(sysfs: Path) -> list[PortReading]:
    """Every port of every device under `sysfs` (/sys/class/infiniband), sorted; none when the
    directory is missing (a node without RDMA hardware)."""
    if not sysfs.is_dir():
        return []
    readings = []
    for device_dir in sorted(sysfs.iterdir()):
        ports = device_dir / "ports"
        if not ports.is_dir():
            continue
        for port_dir in sorted(ports.iterdir(), key=lambda p: (len(p.name), p.name)):
            readings.append(read_port(device_dir.name, port_dir))
    return readings


# --- NCCL's transport, from the engine log ---------------------------------------------------


class TransportScanner:
    """Follows an engine log and remembers whether NCCL used sockets or IB (RoCE).

    Reads only what was appended since the last scan; a log that shrank was rotated or
    truncated, and is read again from the start. Any socket line wins over IB lines, as in the
    verification check: one rank on sockets slows the whole ring.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.restart()

    def restart(self) -> None:
        self.offset = 0
        self.socket = False
        self.ib = False
        self.partial = b""

    def scan(self) -> int | None:
        """1 for sockets, 0 for IB only, None when the log shows neither (or is missing)."""
        try:
            size = self.path.stat().st_size
            if size < self.offset:
                self.restart()
            with self.path.open("rb") as log:
                log.seek(self.offset)
                chunk = log.read()
        except OSError:
            return self.verdict()
        self.offset += len(chunk)
        *lines, self.partial = (self.partial + chunk).split(b"\n")
        self.note(line.decode("utf-8", "replace") for line in lines)
        return self.verdict()

    def note(self, lines: Iterable[str]) -> None:
        for line in lines:
            if any(marker in line for marker in ENGINE_START_MARKERS):
                self.socket = self.ib = False
            elif any(marker in line for marker in SOCKET_MARKERS):
                self.socket = True
            elif any(marker in line for marker in IB_MARKERS):
                self.ib = True

    def verdict(self) -> int | None:
        if self.socket:
            return 1
        return 0 if self.ib else None


# --- the textfile ----------------------------------------------------------------------------


def escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def labels(reading: PortReading) -> str:
    pairs = (("device", reading.device), ("port", reading.port), ("netdev", reading.netdev))
    return "{" + ",".join(f'{name}="{escape(value)}"' for name, value in pairs) + "}"


def family(name: str, kind: str, help_text: str, samples: list[str]) -> list[str]:
    return [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", *samples] if samples else []


def render(readings: list[PortReading], socket_fallback: int | None) -> str:
    """The textfile: one family per metric, ports in a stable order."""
    xmit = [
        f"sparkrack_rdma_port_xmit_bytes_total{labels(r)} {r.xmit_words * WORD_BYTES}"
        for r in readings
        if r.xmit_words is not None
    ]
    rcv = [
        f"sparkrack_rdma_port_rcv_bytes_total{labels(r)} {r.rcv_words * WORD_BYTES}"
        for r in readings
        if r.rcv_words is not None
    ]
    up = [f"sparkrack_rdma_port_up{labels(r)} {int(r.up)}" for r in readings]
    fallback = (
        [] if socket_fallback is None else [f"sparkrack_nccl_socket_fallback {socket_fallback}"]
    )
    lines = [
        *family(
            "sparkrack_rdma_port_xmit_bytes_total",
            "counter",
            "Bytes the RDMA port transmitted (port_xmit_data, 4-byte words, x 4).",
            xmit,
        ),
        *family(
            "sparkrack_rdma_port_rcv_bytes_total",
            "counter",
            "Bytes the RDMA port received (port_rcv_data, 4-byte words, x 4).",
            rcv,
        ),
        *family("sparkrack_rdma_port_up", "gauge", "1 when the RDMA port state is ACTIVE.", up),
        *family(
            "sparkrack_nccl_socket_fallback",
            "gauge",
            "1 when the engine log shows NCCL on sockets (NET/Socket), 0 on IB/RoCE (NET/IB).",
            fallback,
        ),
    ]
    return "\n".join(lines) + "\n" if lines else ""


def write_atomically(path: Path, content: str) -> None:
    # The temporary name does not end in .prom, so node-exporter never reads it.
    partial = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        partial.write_text(content)
        partial.chmod(0o644)
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)


def collect_once(sysfs: Path, output: Path, scanner: TransportScanner | None) -> None:
    fallback = scanner.scan() if scanner is not None else None
    write_atomically(output, render(read_ports(sysfs), fallback))


# --- command line ----------------------------------------------------------------------------


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--sysfs", type=Path, default=Path("/sys/class/infiniband"))
    parser.add_argument("--output", type=Path, required=True, help="the .prom file to write")
    parser.add_argument("--interval", type=float, default=5.0, help="seconds between writes")
    parser.add_argument("--once", action="store_true", help="write once and exit")
    parser.add_argument(
        "--engine-log", type=Path, help="engine log with NCCL_DEBUG=INFO lines (optional)"
    )
    args = parser.parse_args(argv)
    if args.interval <= 0:
        parser.error(f"--interval must be positive, not {args.interval}")
    return args


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    scanner = TransportScanner(args.engine_log) if args.engine_log else None
    running = True

    def stop(_signum: int, _frame: FrameType | None) -> None:
        nonlocal running
        running = False

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    while True:
        collect_once(args.sysfs, args.output, scanner)
        if args.once or not running:
            return 0
        deadline = time.monotonic() + args.interval
        while running and time.monotonic() < deadline:
            time.sleep(min(0.5, args.interval))
        if not running:
            return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

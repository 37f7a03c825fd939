#!/usr/bin/env python3
"""A stand-in `ib_write_bw` (perftest) for simulated nodes: NOT RDMA. It moves bytes by TCP over
the simulated fabric's veths and prints perftest's result table with the figures it measured,
under a banner that says they are simulated.

Installed as /usr/bin/ib_write_bw in the node image, over perftest's own (which needs a real
HCA). It takes the flags verification passes (`-d DEV -x GID_INDEX -p PORT -n ITERS -s BYTES -F
--report_gbits [SERVER]`) and refuses as perftest does what a real HCA would refuse: a device
sysfs does not list, a port that is not ACTIVE, no GID at the index. The bytes leave by the
device's own netdev (SO_BINDTODEVICE), as an RDMA write leaves by its port, so two ports on
different cables do not connect: the client times out as a queue pair's RTR does. Standard
library only: it runs on the node's python3.
"""

from __future__ import annotations

import argparse
import fcntl
import socket
import struct
import sys
import time
from pathlib import Path

SYSFS = Path("/sys/class/infiniband")
RULE = "-" * 87
CONNECT_TIMEOUT_S = 5.0
ACCEPT_TIMEOUT_S = 30.0


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="ib_write_bw", add_help=False)
    parser.add_argument("-d", "--ib-dev", required=True)
    parser.add_argument("-x", "--gid-index", type=int, default=0)
    parser.add_argument("-p", "--port", type=int, default=18515)
    parser.add_argument("-n", "--iters", type=int, default=5000)
    parser.add_argument("-s", "--size", type=int, default=65536)
    parser.add_argument("-F", "--CPU-freq", action="store_true")
    parser.add_argument("--report_gbits", action="store_true")
    parser.add_argument("server", nargs="?")
    return parser.parse_args(argv)


def port_netdev(device: str, gid_index: int, sysfs: Path = SYSFS) -> str:
    """The netdev the device's GID at `gid_index` belongs to; SystemExit as perftest refuses."""
    port = sysfs / device / "ports" / "1"
    if not port.is_dir():
        sys.exit(f" IB device {device} not found\n Unable to find the Infiniband/RoCE device")
    if not read(port / "state").endswith("ACTIVE"):
        sys.exit(" Port number 1 state is Down\n Couldn't set the link layer")
    netdev = read(port / "gid_attrs" / "ndevs" / str(gid_index))
    if not netdev:
        sys.exit(f" Failed to query GID at index {gid_index} of {device}")
    return netdev


def read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def ipv4_of(netdev: str) -> str:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        request = struct.pack("256s", netdev.encode()[:15])
        try:
            reply = fcntl.ioctl(probe.fileno(), 0x8915, request)  # SIOCGIFADDR
        except OSError:
            sys.exit(f" Failed to query GID: {netdev} has no IPv4 address (no RoCE v2 GID)")
    return socket.inet_ntoa(reply[20:24])


def bound(netdev: str, address: str) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, netdev.encode())
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    return sock


def serve(netdev: str, address: str, args: argparse.Namespace) -> float:
    """Wait for one client, take its bytes; the seconds they took."""
    with bound(netdev, address) as server:
        server.bind((address, args.port))
        server.listen(1)
        server.settimeout(ACCEPT_TIMEOUT_S)
        print("\n" + "*" * 36 + "\n* Waiting for client to connect... *\n" + "*" * 36, flush=True)
        connection, _ = server.accept()
        with connection:
            started, total = time.monotonic(), args.size * args.iters
            while total > 0 and (chunk := connection.recv(min(total, 1 << 20))):
                total -= len(chunk)
            return time.monotonic() - started


def send(netdev: str, address: str, args: argparse.Namespace) -> float:
    """Write the bytes to the server through our port; the seconds they took."""
    with bound(netdev, address) as client:
        client.bind((address, 0))
        client.settimeout(CONNECT_TIMEOUT_S)
        try:
            client.connect((args.server, args.port))
        except OSError as error:
            sys.exit(
                f" Failed to modify QP to RTR ({error.strerror or 'timed out'}): no path from "
                f"{args.ib_dev} ({address}) to {args.server}\n Couldn't connect to "
                f"{args.server}:{args.port}"
            )
        block = bytes(args.size)
        started = time.monotonic()
        for _ in range(args.iters):
            client.sendall(block)
        client.shutdown(socket.SHUT_WR)
        client.recv(1)  # the server's close: every byte arrived
        return time.monotonic() - started


def report(args: argparse.Namespace, seconds: float) -> str:
    gbits = args.size * args.iters * 8 / max(seconds, 1e-9) / 1e9
    rate = args.iters / max(seconds, 1e-9) / 1e6
    return "\n".join(
        [
            RULE,
            "                    RDMA_Write BW Test",
            f" Dual-port       : OFF\t\tDevice         : {args.ib_dev}",
            " sparkrack sim    : SIMULATED: TCP over the simulated fabric, not RDMA",
            f" GID index       : {args.gid_index}",
            RULE,
            " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]",
            f" {args.size:<10} {args.iters:<16} {gbits:<18.2f} {gbits:<20.2f} {rate:.6f}",
            RULE,
        ]
    )


def main(argv: list[str]) -> int:
    args = parse(argv)
    netdev = port_netdev(args.ib_dev, args.gid_index)
    address = ipv4_of(netdev)
    seconds = send(netdev, address, args) if args.server else serve(netdev, address, args)
    print(report(args, seconds), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

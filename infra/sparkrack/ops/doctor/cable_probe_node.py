"""Runs ON a node, as root, under the system python3: which peer port each fabric port hears.

Usage: python3 -c "$(cat cable_probe_node.py)" NONCE NODE WAIT_S LISTEN_S NETDEV...

Every listed port sends a small broadcast frame with the IEEE local-experimental EtherType
0x88B5 naming this node and port, and records the frames of the same run (NONCE) it receives.
Link level only: no address, no LLDP daemon, the same on a ConnectX-7 as on a veth. A port that
was administratively down is brought up for the probe and put back down in every case (signals
included); nothing else about a port is touched. Prints one JSON object: netdev -> findings.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
from typing import Any

ETHERTYPE = 0x88B5
BROADCAST = b"\xff" * 6
SEND_EVERY_S = 0.2
HEADER = 14


def sysfs(netdev: str, name: str) -> str | None:
    try:
        with open(f"/sys/class/net/{netdev}/{name}") as handle:
            return handle.read().strip()
    except OSError:
        return None  # a down port answers EINVAL for carrier and speed


def admin_up(netdev: str) -> bool:
    flags = sysfs(netdev, "flags")
    return flags is not None and int(flags, 16) & 1 == 1


def set_link(netdev: str, state: str) -> None:
    subprocess.run(["ip", "link", "set", "dev", netdev, state], check=True)


def wait_for_carrier(netdevs: list[str], wait_s: float) -> None:
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and any(sysfs(d, "carrier") != "1" for d in netdevs):
        time.sleep(0.1)


def open_sockets(netdevs: list[str]) -> dict[socket.socket, str]:
    sockets = {}
    for netdev in netdevs:
        sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETHERTYPE))
        sock.bind((netdev, ETHERTYPE))
        sockets[sock] = netdev
    return sockets


def beacon(netdev: str, nonce: str, node: str) -> bytes:
    mac = bytes.fromhex((sysfs(netdev, "address") or "00:00:00:00:00:00").replace(":", ""))
    payload = json.dumps({"nonce": nonce, "node": node, "netdev": netdev}).encode()
    return BROADCAST + mac + ETHERTYPE.to_bytes(2, "big") + payload


def send_all(sockets: dict[socket.socket, str], nonce: str, node: str) -> None:
    for sock, netdev in sockets.items():
        with contextlib.suppress(OSError):  # no carrier yet: the next round may go out
            sock.send(beacon(netdev, nonce, node))


def heard_from(frame: bytes, nonce: str) -> list[str] | None:
    try:
        message = json.loads(frame[HEADER:].rstrip(b"\0"))
    except ValueError:
        return None
    if not isinstance(message, dict) or message.get("nonce") != nonce:
        return None  # another run's frame, or not ours at all
    return [str(message.get("node")), str(message.get("netdev"))]


def listen(
    sockets: dict[socket.socket, str], nonce: str, node: str, listen_s: float
) -> dict[str, list[list[str]]]:
    heard: dict[str, list[list[str]]] = {netdev: [] for netdev in sockets.values()}
    end, next_send = time.monotonic() + listen_s, 0.0
    while time.monotonic() < end:
        if time.monotonic() >= next_send:
            send_all(sockets, nonce, node)
            next_send = time.monotonic() + SEND_EVERY_S
        ready, _, _ = select.select(list(sockets), [], [], 0.05)
        for sock in ready:
            frame, address = sock.recvfrom(2048)
            peer = heard_from(frame, nonce)
            if address[2] != socket.PACKET_OUTGOING and peer and peer not in heard[sockets[sock]]:
                heard[sockets[sock]].append(peer)
    return heard


def port_state(netdev: str, was_up: bool) -> dict[str, Any]:
    # Read before listening: by the end, the peer may have put its own raised port back down.
    return {
        "present": True,
        "was_up": was_up,
        "carrier": sysfs(netdev, "carrier") == "1",
        "speed_mbps": sysfs(netdev, "speed"),
    }


def stop(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)  # unwinds through `finally`: raised ports go back down


def probe(
    nonce: str, node: str, wait_s: float, listen_s: float, netdevs: list[str]
) -> dict[str, Any]:
    present = [d for d in netdevs if os.path.exists(f"/sys/class/net/{d}")]
    raised = [d for d in present if not admin_up(d)]
    report: dict[str, Any] = {d: {"present": False} for d in netdevs if d not in present}
    sockets: dict[socket.socket, str] = {}
    try:
        for netdev in raised:
            set_link(netdev, "up")
        wait_for_carrier(present, wait_s)
        for netdev in present:
            report[netdev] = port_state(netdev, netdev not in raised)
        sockets = open_sockets(present)
        for netdev, peers in listen(sockets, nonce, node, listen_s).items():
            report[netdev]["heard"] = peers
    finally:
        for sock in sockets:
            sock.close()
        for netdev in raised:
            subprocess.run(["ip", "link", "set", "dev", netdev, "down"], check=False)
    return report


def main(argv: list[str]) -> int:
    for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(signum, stop)
    nonce, node, wait_s, listen_s, *netdevs = argv
    print(json.dumps(probe(nonce, node, float(wait_s), float(listen_s), netdevs)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""A don't-fragment ping at the fabric's MTU and what its output says; who answers ARP."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from sparkrack.facts import Fact


@dataclass(frozen=True)
class PingResult:
    passed: bool
    detail: str  # the line that says why, for a failure


def parse_ping(stdout: str, exit_status: int) -> PingResult:
    """iputils ping's output: the loss summary, and on failure the last `ping:` error with it
    ('Message too long' is a smaller MTU on the path)."""
    lines = [line.strip() for line in stdout.splitlines() if line.strip()]
    loss = next((line for line in lines if "packet loss" in line), "")
    if exit_status == 0:
        return PingResult(True, loss)
    errors = [line.removeprefix("ping: ") for line in lines if line.startswith("ping:")]
    detail = "; ".join(part for part in (errors[-1] if errors else "", loss) if part)
    return PingResult(False, detail or f"ping exited {exit_status}")


def jumbo_ping_command(netdev: str, address: str, payload_bytes: int) -> str:
    # Don't fragment at full size: a hop with a smaller MTU refuses rather than splits the frame.
    ping = [
        "ping",
        "-M",
        "do",
        "-s",
        str(payload_bytes),
        "-c",
        "3",
        "-i",
        "0.2",
        "-W",
        "1",
        "-I",
        netdev,
    ]
    return shlex.join([*ping, address]) + " 2>&1"


def parse_arp_reply(stdout: str) -> str | None:
    """`Unicast reply from 198.19.0.2 [6E:EC:37:A7:85:C9]  0.531ms` -> the MAC, lower case;
    None when nobody answered."""
    found = re.search(r"reply from \S+ \[([0-9A-Fa-f:]{17})\]", stdout)
    return found.group(1).lower() if found else None


def arp_reply(netdev: str, address: str) -> Fact[str | None]:
    """The MAC that answers an ARP request for `address` sent out of `netdev`."""
    # arping exits 1 when nobody answers: that is a reading. It needs a raw socket, so root.
    command = shlex.join(["arping", "-c", "1", "-w", "2", "-I", netdev, address])
    return Fact(f"{command} || true", parse_arp_reply, sudo=True)

"""A don't-fragment ping at the fabric's MTU, and what its output says."""

from __future__ import annotations

import shlex
from dataclasses import dataclass


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

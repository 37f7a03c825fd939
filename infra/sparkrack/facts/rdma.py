"""RDMA devices and their port state, as sysfs has them (/sys/class/infiniband)."""

from __future__ import annotations

from sparkrack.facts import Fact


def parse_rdma(stdout: str) -> dict[str, str]:
    """device -> port 1 state as sysfs words it ('4: ACTIVE', '1: DOWN')."""
    devices = {}
    for line in stdout.splitlines():
        name, _, state = line.strip().partition(" ")
        if name:
            devices[name] = state.strip() or "unknown"
    return devices


def rdma_devices() -> Fact[dict[str, str]]:
    command = (
        'for d in /sys/class/infiniband/*; do [ -e "$d" ] || continue; '
        'printf \'%s %s\\n\' "${d##*/}" "$(cat "$d/ports/1/state" 2>/dev/null || echo unknown)"; '
        "done"
    )
    return Fact(command, parse_rdma)

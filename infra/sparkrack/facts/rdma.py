"""RDMA devices, their port state and a port's GID entries, as sysfs has them
(/sys/class/infiniband)."""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from sparkrack.facts import Fact

INFINIBAND = "/sys/class/infiniband"


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


@dataclass(frozen=True)
class GidAttrs:
    """One GID table entry of a port: its kind and the netdev it belongs to, '' when unset."""

    kind: str  # 'RoCE v2', 'IB/RoCE v1'
    netdev: str


def parse_gid_attrs(stdout: str) -> GidAttrs:
    kind, netdev = [*stdout.splitlines(), "", ""][:2]
    return GidAttrs(kind.strip(), netdev.strip())


def gid_attrs(device: str, index: int, port: int = 1) -> Fact[GidAttrs]:
    # An unused entry reads as EINVAL in sysfs, a missing device as no file: both print ''.
    attrs = shlex.quote(f"{INFINIBAND}/{device}/ports/{int(port)}/gid_attrs")
    reads = " ".join(
        f'"$(cat {attrs}/{part}/{int(index)} 2>/dev/null)"' for part in ("types", "ndevs")
    )
    return Fact(f"printf '%s\\n%s\\n' {reads}", parse_gid_attrs)

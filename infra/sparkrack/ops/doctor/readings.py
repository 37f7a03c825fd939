"""What `sparkrack doctor` reads from a rack and what it says: the readings `gather` takes
over SSH (or tests from captured output), and the findings `judge` and `cables` judge
from them. Pure data."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from sparkrack.facts.links import LinkState
from sparkrack.facts.nccl_env import EnvHit
from sparkrack.facts.ping import PingResult

Status = Literal["ok", "FAIL", "todo", "skip"]


@dataclass(frozen=True)
class Finding:
    status: Status
    node: str
    check: str
    observed: str
    next_step: str = ""


@dataclass(frozen=True)
class PortProbe:
    """One fabric port as the cable probe saw it (see cable_probe_node.py)."""

    present: bool
    was_up: bool = False
    carrier: bool = False
    speed_mbps: str | None = None
    heard: tuple[tuple[str, str], ...] = ()


def parse_probe(stdout: str) -> dict[str, PortProbe]:
    ports = {}
    for netdev, seen in json.loads(stdout).items():
        heard = tuple((str(node), str(port)) for node, port in seen.get("heard", []))
        ports[netdev] = PortProbe(
            present=bool(seen["present"]),
            was_up=bool(seen.get("was_up", False)),
            carrier=bool(seen.get("carrier", False)),
            speed_mbps=seen.get("speed_mbps"),
            heard=heard,
        )
    return ports


@dataclass(frozen=True)
class NodeReading:
    os_name: str
    links: Mapping[str, LinkState]
    rdma: Mapping[str, str]
    memlock: str
    env_hits: Sequence[EnvHit]
    image_env: Sequence[str] | None  # None: the image is not on the node


@dataclass(frozen=True)
class RackReading:
    nodes: Mapping[str, NodeReading] = field(default_factory=dict)
    unreachable: Mapping[str, str] = field(default_factory=dict)  # node -> the SSH error
    read_errors: Mapping[str, str] = field(default_factory=dict)  # node -> a read that failed
    probes: Mapping[str, Mapping[str, PortProbe]] = field(default_factory=dict)
    probe_errors: Mapping[str, str] = field(default_factory=dict)
    pings: Mapping[int, PingResult] = field(default_factory=dict)  # index in plan.jumbo_pings

"""Netdevs as iproute2 reports them: state, MTU and global addresses (`ip -j addr show`), the
connected routes of one (`ip -j route show`), and every netdev's MAC (`ip -j link show`).

"Up" is two things, both read here: the UP flag (`up`: administratively up, what a Link sets)
and `operstate` (up with a carrier: what a cabled port must be)."""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from typing import Any

from sparkrack.facts import Fact


@dataclass(frozen=True)
class LinkState:
    netdev: str
    up: bool  # administratively up (the UP flag), whether or not a carrier is present
    mtu: int
    addresses: tuple[str, ...]  # CIDR, global scope only, sorted
    operstate: str = "UNKNOWN"  # UP, DOWN, LOWERLAYERDOWN, ...: the carrier's side of "up"


def global_addresses(link: dict[str, Any]) -> tuple[str, ...]:
    # Link-local IPv6 addresses come and go with the link: they are not configuration.
    return tuple(
        sorted(
            f"{info['local']}/{info['prefixlen']}"
            for info in link.get("addr_info", [])
            if info.get("scope") == "global"
        )
    )


def link_from_json(link: dict[str, Any]) -> LinkState:
    return LinkState(
        netdev=link["ifname"],
        up="UP" in link["flags"],
        mtu=int(link["mtu"]),
        addresses=global_addresses(link),
        operstate=str(link.get("operstate", "UNKNOWN")),
    )


def parse_links(stdout: str) -> dict[str, LinkState]:
    return {link["ifname"]: link_from_json(link) for link in json.loads(stdout or "[]")}


def parse_link(stdout: str) -> LinkState | None:
    links = list(parse_links(stdout).values())
    return links[0] if links else None


def link_state(netdev: str) -> Fact[LinkState | None]:
    # `ip` says 'Device "x" does not exist.' and exits 1 for a missing netdev: that is absence.
    quoted = shlex.quote(netdev)
    command = f"if [ -e /sys/class/net/{quoted} ]; then ip -j addr show dev {quoted}; fi"
    return Fact(command, parse_link)


def all_links() -> Fact[dict[str, LinkState]]:
    return Fact("ip -j addr show", parse_links)


@dataclass(frozen=True)
class Route:
    destination: str  # "198.19.0.0/30", or "default"
    scope: str  # "link" for a connected route


def parse_routes(stdout: str) -> tuple[Route, ...]:
    routes = json.loads(stdout or "[]")
    return tuple(Route(str(r.get("dst", "")), str(r.get("scope", "global"))) for r in routes)


def routes(netdev: str) -> Fact[tuple[Route, ...]]:
    return Fact(f"ip -j route show dev {shlex.quote(netdev)}", parse_routes)


def parse_macs(stdout: str) -> dict[str, str]:
    """MAC (lower case) -> netdev, for every netdev that has one."""
    links = json.loads(stdout or "[]")
    return {str(link["address"]).lower(): link["ifname"] for link in links if link.get("address")}


def macs() -> Fact[dict[str, str]]:
    return Fact("ip -j link show", parse_macs)

"""Link: a netdev up, at its MTU, with exactly its addresses and their connected routes, applied
in that order.

Seed 001: an MTU set after the address silently lost the connected route. So the order is link
up, MTU, then addresses, and an MTU change on an addressed link re-adds the addresses after it.
The routes are state too: one deleted under its address is drift, and `up` puts it back as the
kernel makes it (`proto kernel scope link src`), without touching the address.
"""

from __future__ import annotations

import ipaddress
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
from pulumi.dynamic import CheckFailure

from sparkrack.asking import gather
from sparkrack.facts.links import link_state, routes
from sparkrack.resources.base import PULUMI_MODULE, Live, NodeProvider, NodeResource, Props
from sparkrack.transport import ssh
from sparkrack.transport.target import SshError, Target


def leased_address(target: Target, netdev: str) -> str:
    """The address a DHCP lease gave the node's `netdev`, read when a copy needs it: the Plan
    cannot know it. A node without one cannot be copied to over the fabric: said, naming both."""
    state = gather(target, link_state(netdev))
    addresses = (
        [a for a in state.addresses if ipaddress.ip_interface(a).version == 4] if state else []
    )
    if not addresses:
        raise SshError(f"{target.where()}: {netdev} has no DHCP lease to copy to (`up` leases it)")
    return str(ipaddress.ip_interface(addresses[0]).ip)


def normalize_addresses(addresses: list[str]) -> list[str]:
    return sorted(str(ipaddress.ip_interface(address)) for address in addresses)


def ip(*args: str) -> str:
    return shlex.join(["ip", *args])


def apply_commands(netdev: str, up: bool, mtu: int, addresses: list[str], live: Live) -> list[str]:
    """The `ip` commands, in the seed's order, that take the link from `live` to the desired."""
    have, want = set(live["addresses"]), set(addresses)
    readd = want & have if live["mtu"] != mtu else set()  # the MTU change drops their route
    commands = [ip("link", "set", "dev", netdev, "up")] if up else []
    commands += [ip("addr", "del", a, "dev", netdev) for a in sorted((have - want) | readd)]
    if live["mtu"] != mtu:
        commands.append(ip("link", "set", "dev", netdev, "mtu", str(int(mtu))))
    commands += [ip("addr", "add", a, "dev", netdev) for a in sorted((want - have) | readd)]
    if not up and live["up"]:
        commands.append(ip("link", "set", "dev", netdev, "down"))
    return commands


def connected_networks(addresses: list[str]) -> list[str]:
    """The connected route each address brings, by destination."""
    return sorted({str(ipaddress.ip_interface(address).network) for address in addresses})


def route_commands(netdev: str, kept: list[str], live_routes: list[str]) -> list[str]:
    """The connected route of each kept address that the live routes lack, added as the kernel
    adds it with the address (an address added or re-added brings its own)."""
    missing = [
        ipaddress.ip_interface(address)
        for address in kept
        if str(ipaddress.ip_interface(address).network) not in live_routes
    ]
    return [
        ip(
            "route",
            "replace",
            str(a.network),
            "dev",
            netdev,
            "proto",
            "kernel",
            "scope",
            "link",
            "src",
            str(a.ip),
        )
        for a in missing
    ]


def restore_commands(netdev: str, addresses: list[str], restore: dict[str, Any]) -> list[str]:
    """Undo what create did: our addresses off, the MTU and up/down state found before."""
    commands = [ip("addr", "del", a, "dev", netdev) for a in addresses]
    commands.append(ip("link", "set", "dev", netdev, "mtu", str(int(restore["mtu"]))))
    if not restore["up"]:
        commands.append(ip("link", "set", "dev", netdev, "down"))
    return commands


class LinkProvider(NodeProvider):
    INPUTS = ("netdev", "up", "mtu", "addresses", "routes")
    STATE = ("up", "mtu", "addresses", "routes")
    REPLACE = ("netdev",)
    DERIVED = ("routes",)

    def identity(self, props: Props) -> str:
        return str(props["netdev"])

    def validate(self, props: Props) -> list[CheckFailure]:
        failures = []
        if not 68 <= int(props["mtu"]) <= 65535:
            failures.append(CheckFailure("mtu", f"{props['mtu']} is outside 68..65535"))
        try:
            normalize_addresses(list(props["addresses"]))
        except ValueError as error:
            failures.append(CheckFailure("addresses", str(error)))
        return failures

    def derive(self, props: Props) -> dict[str, Any]:
        addresses = normalize_addresses(list(props["addresses"]))
        networks = connected_networks(addresses) if props["up"] else []  # down: no routes
        return {"addresses": addresses, "mtu": int(props["mtu"]), "routes": networks}

    def observe(self, target: Target, props: Props) -> Live | None:
        netdev = str(props["netdev"])
        state = gather(target, link_state(netdev))
        if state is None:
            return None
        wanted = connected_networks(list(props["addresses"]))
        connected = {r.destination for r in gather(target, routes(netdev)) if r.scope == "link"}
        return {
            "up": state.up,
            "mtu": state.mtu,
            "addresses": list(state.addresses),
            "routes": [network for network in wanted if network in connected],
        }

    def apply(self, target: Target, props: Props, live: Live | None) -> dict[str, Any]:
        if live is None:
            raise SshError(f"{target.where()}: no netdev {props['netdev']}")
        netdev, addresses, mtu = props["netdev"], props["addresses"], props["mtu"]
        commands = apply_commands(netdev, props["up"], mtu, addresses, live)
        if props["up"] and live["mtu"] == mtu:  # else every address is re-added, with its route
            kept = [a for a in addresses if a in live["addresses"]]
            commands += route_commands(netdev, kept, live["routes"])
        if commands:
            ssh.run(target, " && ".join(commands), sudo=True)
        return {"restore": {"up": live["up"], "mtu": live["mtu"]}}

    def remove(self, target: Target, props: Props) -> None:
        live = self.observe(target, props)
        if live is None:
            return  # the netdev is gone: nothing of ours is left on it
        ours = [a for a in props["addresses"] if a in live["addresses"]]
        restore = props.get("restore") or {"up": live["up"], "mtu": live["mtu"]}
        ssh.run(target, " && ".join(restore_commands(props["netdev"], ours, restore)), sudo=True)

    def undo(self, target: Target, props: Props, before: Live | None) -> None:
        if before is None:
            return
        added = [a for a in props["addresses"] if a not in before["addresses"]]
        restore = {"up": before["up"], "mtu": before["mtu"]}
        ssh.run(target, " && ".join(restore_commands(props["netdev"], added, restore)), sudo=True)


@dataclass(frozen=True)
class LinkArgs:
    """The netdev up (or down), at `mtu`, with `addresses`, in that order."""

    target: Target
    netdev: str
    mtu: int
    addresses: Sequence[str]
    up: bool = True


class Link(NodeResource, module=PULUMI_MODULE, name="Link"):
    """A netdev on one node. Outputs: up, mtu, addresses as `ip -j addr show` reports them."""

    mtu: pulumi.Output[int]
    addresses: pulumi.Output[list[str]]

    def __init__(
        self, name: str, args: LinkArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        props = {"netdev": args.netdev, "up": args.up, "mtu": args.mtu}
        props |= {"addresses": list(args.addresses), "routes": None}
        super().__init__(LinkProvider(), name, args.target, props, opts)

"""The simulated ConnectX-7 fabric: veth pairs named like the real netdevs, wired per the stack.

A direct cable is one veth pair with an end in each node. A switch is one Linux bridge in the
stack's fabric namespace; every cabled node port is a veth pair whose far end is a bridge port.
One bridge, not one per switch port: a 4-way breakout is four interfaces of one switch in its
default VLAN, so every node reaches every other, as on the real rack. A node port with no cable
still exists (a real GB10 always shows four netdevs): its far end sits, down, in the fabric
namespace, so the port reads NO-CARRIER when brought up.

Node ends start as a fresh machine's do: down, MTU 1500, no address. Configuring them is the
fabric role's job; re-running `up` only creates what is missing and never resets a live port.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sparkrack.sim.shell import SimError, run
from sparkrack.sim.topology import SimTopology

BRIDGE = "switch0"
# The switch side carries jumbo frames, so the nodes can set MTU 9000 (a veth drops a frame
# larger than its peer's MTU).
SWITCH_MTU = 9216


@dataclass(frozen=True)
class VethEnd:
    """One end of a veth pair: in a node (`node` set) or in the fabric namespace (`node` None)."""

    node: str | None
    name: str

    def describe(self) -> str:
        return f"{self.node or 'fabric'}:{self.name}"


@dataclass(frozen=True)
class VethPair:
    a: VethEnd
    b: VethEnd
    bridged: bool = False  # b is a switch port, attached to the bridge and up

    def describe(self) -> str:
        return f"{self.a.describe()} <-> {self.b.describe()}"


def fabric_namespace(stack: str) -> str:
    return f"sparkrack-{stack}-fabric"


def fabric_plan(topology: SimTopology) -> tuple[VethPair, ...]:
    """Every veth pair the topology needs: cables, switch ports, then unplugged node ports."""
    pairs = cable_pairs(topology) + switch_pairs(topology)
    used = [end for pair in pairs for end in (pair.a, pair.b) if end.node is not None]
    check_ports(topology, used)
    return pairs + unplugged_pairs(topology, set(used))


def cable_pairs(topology: SimTopology) -> tuple[VethPair, ...]:
    return tuple(
        VethPair(VethEnd(c.a_node, c.a_port_netdev), VethEnd(c.b_node, c.b_port_netdev))
        for c in topology.cables
    )


def switch_pairs(topology: SimTopology) -> tuple[VethPair, ...]:
    if topology.switch is None:
        return ()
    return tuple(
        VethPair(VethEnd(node, netdev), VethEnd(None, f"p{port}m{member}"), bridged=True)
        for port, (_, members) in enumerate(topology.switch.ports, start=1)
        for member, (node, netdev) in enumerate(members)
    )


def unplugged_pairs(topology: SimTopology, used: set[VethEnd]) -> tuple[VethPair, ...]:
    return tuple(
        VethPair(VethEnd(node.name, netdev), VethEnd(None, f"u{index}n{port}"))
        for index, node in enumerate(topology.nodes, start=1)
        for port, netdev in enumerate(node.netdevs)
        if VethEnd(node.name, netdev) not in used
    )


def check_ports(topology: SimTopology, ends: list[VethEnd]) -> None:
    """Each cabled port exists on its node and carries one cable."""
    names = {node.name: node for node in topology.nodes}
    seen: set[VethEnd] = set()
    for end in ends:
        node = names.get(end.node or "")
        if node is None:
            raise SimError(f"stack {topology.stack}: cable to unknown node {end.node}")
        if end.name not in node.netdevs:
            raise SimError(f"stack {topology.stack}, node {node.name}: no port {end.name}")
        if end in seen:
            raise SimError(f"stack {topology.stack}, node {node.name}: {end.name} cabled twice")
        seen.add(end)


# --- applying the plan ----------------------------------------------------------------------


def ip_in(namespace: str | int) -> list[str]:
    """`ip` inside a node (by container PID) or in a named namespace."""
    if isinstance(namespace, int):
        return ["nsenter", "-t", str(namespace), "-n", "ip"]
    return ["ip", "-n", namespace]


def links_in(namespace: str | int) -> dict[str, dict[str, Any]]:
    """name -> `ip -j -d link` record for every link in the namespace."""
    done = run([*ip_in(namespace), "-j", "-d", "link", "show"], what=f"links in {namespace}")
    return {link["ifname"]: link for link in json.loads(done.stdout or "[]")}


def namespace_of(end: VethEnd, pids: Mapping[str, int], stack: str) -> str | int:
    return fabric_namespace(stack) if end.node is None else pids[end.node]


def ensure_fabric(topology: SimTopology, pids: Mapping[str, int]) -> list[str]:
    """Create what is missing; returns a line per pair created or rewired."""
    ensure_fabric_namespace(topology.stack, bridge=topology.switch is not None)
    namespaces: list[str | int] = [fabric_namespace(topology.stack), *pids.values()]
    links = {ns: links_in(ns) for ns in namespaces}
    changed = []
    for pair in fabric_plan(topology):
        a_ns = namespace_of(pair.a, pids, topology.stack)
        b_ns = namespace_of(pair.b, pids, topology.stack)
        if pair_is_wired(links[a_ns].get(pair.a.name), links[b_ns].get(pair.b.name)):
            continue
        for namespace, end in ((a_ns, pair.a), (b_ns, pair.b)):
            if end.name in links[namespace]:
                run([*ip_in(namespace), "link", "del", end.name], what=f"remove {end.describe()}")
        create_pair(pair, a_ns, b_ns, topology.stack)
        changed.append(pair.describe())
    return changed


def pair_is_wired(a: dict[str, Any] | None, b: dict[str, Any] | None) -> bool:
    """Both ends exist and each names the other as its peer."""
    if a is None or b is None:
        return False
    return bool(a.get("link_index") == b["ifindex"] and b.get("link_index") == a["ifindex"])


def create_pair(pair: VethPair, a_ns: str | int, b_ns: str | int, stack: str) -> None:
    args = ["ip", "link", "add", pair.a.name, "netns", str(a_ns), "mtu", "1500", "type", "veth"]
    args += ["peer", "name", pair.b.name, "netns", str(b_ns)]
    run(args, what=f"stack {stack}: veth {pair.describe()}")
    if pair.bridged:
        ip = ip_in(b_ns)
        what = f"stack {stack}: switch port {pair.b.name}"
        run([*ip, "link", "set", pair.b.name, "mtu", str(SWITCH_MTU)], what=what)
        run([*ip, "link", "set", pair.b.name, "master", BRIDGE, "up"], what=what)


def ensure_fabric_namespace(stack: str, *, bridge: bool) -> None:
    namespace = fabric_namespace(stack)
    if namespace not in named_namespaces():
        run(["ip", "netns", "add", namespace], what=f"stack {stack}: fabric namespace")
    ip = ip_in(namespace)
    run([*ip, "link", "set", "lo", "up"], what=f"stack {stack}: fabric namespace")
    if bridge and BRIDGE not in links_in(namespace):
        what = f"stack {stack}: switch bridge"
        run([*ip, "link", "add", BRIDGE, "type", "bridge", "stp_state", "0"], what=what)
        run([*ip, "link", "set", BRIDGE, "type", "bridge", "forward_delay", "0"], what=what)
        run([*ip, "link", "set", BRIDGE, "mtu", str(SWITCH_MTU), "up"], what=what)


def named_namespaces() -> set[str]:
    lines = run(["ip", "netns", "list"], what="ip netns list").stdout.splitlines()
    return {line.split()[0] for line in lines if line.strip()}


def remove_fabric_namespace(stack: str) -> bool:
    namespace = fabric_namespace(stack)
    if namespace not in named_namespaces():
        return False
    run(["ip", "netns", "del", namespace], what=f"stack {stack}: remove fabric namespace")
    return True


def missing_links(topology: SimTopology, pids: Mapping[str, int]) -> list[str]:
    """Pairs that are absent or mis-wired; a node without a PID (not running) counts as absent."""
    namespace = fabric_namespace(topology.stack)
    links: dict[str | int, dict[str, dict[str, Any]]] = {ns: links_in(ns) for ns in pids.values()}
    links[namespace] = links_in(namespace) if namespace in named_namespaces() else {}
    missing = []
    for pair in fabric_plan(topology):
        if any(end.node is not None and end.node not in pids for end in (pair.a, pair.b)):
            missing.append(pair.describe())
            continue
        a = links[namespace_of(pair.a, pids, topology.stack)].get(pair.a.name)
        b = links[namespace_of(pair.b, pids, topology.stack)].get(pair.b.name)
        if not pair_is_wired(a, b):
            missing.append(pair.describe())
    return missing

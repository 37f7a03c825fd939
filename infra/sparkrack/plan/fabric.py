"""The fabric: each node's links in apply order, their addresses, the jumbo pings that prove every
cable, and the ports NCCL should use.

A segment is one layer-2 path between NIC functions: one half of a cable (GB10 ports have two
PCIe halves, each its own netdev), or one rail of a switch. Static addressing gives each segment
the next /24 of the pool, hosts numbered in node order.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal, NamedTuple

from sparkrack.stackspec import ClusterSpec, Endpoint, FabricSpec, NicFunction, StrictModel
from sparkrack.stackspec.errors import Problem, SpecError

# ping -M do -s 8972 fills an MTU of 9000: 20 bytes of IPv4 header, 8 of ICMP.
ICMP_OVERHEAD = 28


class LinkPlan(StrictModel):
    port: str
    netdev: str
    rdma_device: str | None
    mtu: int
    addressing: Literal["static", "dhcp"]
    address: str | None  # CIDR; None with DHCP (the udhcpc bridge script sets it)
    # The segment's /24 from fabric.subnet: the address's network, or where the DHCP server is
    # to lease (verification checks the lease and its connected route); None when undeclared.
    network: str | None = None
    peer: str  # for people: "spark-2:enp1s0f1np1" or "switch switch-1 port 1"
    # For programs (the simulator wires from these): a cable's far end, or the switch port.
    peer_node: str | None = None
    peer_netdev: str | None = None
    switch: str | None = None
    switch_port: str | None = None


class PingCheck(StrictModel):
    """A don't-fragment ping at full MTU across one segment; it proves the cable map."""

    from_node: str
    from_netdev: str
    to_node: str
    to_netdev: str
    to_address: str | None  # None with DHCP: looked up on the peer when verifying
    payload_bytes: int
    crossed: bool


class FabricPlan(StrictModel):
    mtu: int | None
    addressing: Literal["static", "dhcp"] | None
    crossed: bool  # some link joins different port numbers: NCCL must pair different NICs
    multi_peer: bool  # some node reaches more than one peer by cable (a ring)
    links: dict[str, tuple[LinkPlan, ...]]
    nccl_ports: dict[str, tuple[str, ...]]
    pings: tuple[PingCheck, ...]


@dataclass(frozen=True)
class _End:
    node: str
    port: str
    function: NicFunction


@dataclass(frozen=True)
class _Segment:
    ends: tuple[_End, ...]  # in node order
    switch_port: dict[str, str] | None  # node -> switch port name, for a switch rail
    crossed: bool


# ARP flux: by default Linux answers ARP for any of its addresses on any port. Where two ports
# of a box share a broadcast domain (a switch), a peer then learns the wrong port's MAC and RoCE
# traffic for one port arrives on the other (the AMD and IBM multi-rail RoCE guides set these
# two; seen on sim-16, where the cable-peer check caught it). Answer only on the port that owns
# the address, and announce from it.
FABRIC_SYSCTLS = {"net.ipv4.conf.all.arp_ignore": "1", "net.ipv4.conf.all.arp_announce": "2"}


def fabric_sysctls(links: tuple[LinkPlan, ...]) -> dict[str, str]:
    """The kernel settings a node with fabric links needs; none without links."""
    return dict(FABRIC_SYSCTLS) if links else {}


def plan_fabric(spec: ClusterSpec) -> FabricPlan:
    fabric = spec.fabric
    names = [node.name for node in spec.nodes]
    if fabric is None:
        empty = {name: () for name in names}
        return FabricPlan(
            mtu=None,
            addressing=None,
            crossed=False,
            multi_peer=False,
            links=empty,
            nccl_ports=empty,
            pings=(),
        )
    segments = list(
        _cable_segments(spec, fabric) if fabric.cables else _switch_segments(spec, fabric)
    )
    networks = _networks(spec, fabric, segments)
    addresses = _addresses(spec, fabric, segments, networks)
    peers = _cable_peers(spec, fabric)
    return FabricPlan(
        mtu=fabric.mtu,
        addressing=fabric.addressing,
        crossed=any(segment.crossed for segment in segments),
        multi_peer=any(len(node_peers) > 1 for node_peers in peers.values()),
        links={
            name: _node_links(spec, fabric, name, segments, networks, addresses) for name in names
        },
        nccl_ports={name: _nccl_ports(spec, fabric, name, peers) for name in names},
        pings=tuple(_pings(fabric, segments, addresses)),
    )


def _cable_segments(spec: ClusterSpec, fabric: FabricSpec) -> Iterator[_Segment]:
    order = [node.name for node in spec.nodes]
    for cable in fabric.cables:
        ports = [spec.endpoint_port(cable.a), spec.endpoint_port(cable.b)]
        for a, b in zip(ports[0].functions, ports[1].functions, strict=False):
            ends = [_End(cable.a.node, ports[0].name, a), _End(cable.b.node, ports[1].name, b)]
            ends.sort(key=lambda end: order.index(end.node))
            yield _Segment(tuple(ends), None, ports[0].name != ports[1].name)


def _switch_segments(spec: ClusterSpec, fabric: FabricSpec) -> Iterator[_Segment]:
    """One segment per rail: the k-th plugged port's j-th function of every node."""
    assert fabric.switch is not None
    order = [node.name for node in spec.nodes]
    plugged: dict[str, list[tuple[str, Endpoint]]] = {name: [] for name in order}
    for port in fabric.switch.ports:
        for endpoint in port.nodes:
            plugged[endpoint.node].append((port.name, endpoint))
    rails: dict[tuple[int, int], list[tuple[_End, str]]] = {}
    for name in order:
        for k, (switch_port, endpoint) in enumerate(plugged[name]):
            nic = spec.endpoint_port(endpoint)
            for j, function in enumerate(nic.functions):
                rails.setdefault((k, j), []).append((_End(name, nic.name, function), switch_port))
    port_names = {end.port for lanes in rails.values() for end, _ in lanes}
    for key in sorted(rails):
        lanes = rails[key]
        yield _Segment(
            tuple(end for end, _ in lanes), {end.node: p for end, p in lanes}, len(port_names) > 1
        )


def _networks(
    spec: ClusterSpec, fabric: FabricSpec, segments: list[_Segment]
) -> list[ipaddress.IPv4Network | None]:
    """Each segment's /24, carved from fabric.subnet in segment order."""
    if fabric.subnet is None:
        return [None] * len(segments)
    subnets = list(fabric.subnet.subnets(new_prefix=24))
    if len(segments) > len(subnets):
        message = (
            f"{fabric.subnet} holds {len(subnets)} /24 subnets; the fabric needs {len(segments)}"
        )
        raise SpecError(spec.stack, [Problem("fabric.subnet", message)])
    return list(subnets[: len(segments)])


def _addresses(
    spec: ClusterSpec,
    fabric: FabricSpec,
    segments: list[_Segment],
    networks: list[ipaddress.IPv4Network | None],
) -> dict[_End, str]:
    """Static: each node's `rail_address` on each segment it is on."""
    if fabric.addressing != "static":
        return {}
    order = [node.name for node in spec.nodes]
    addresses = {}
    for segment, subnet in zip(segments, networks, strict=True):
        assert subnet is not None  # the spec refuses static addressing without a subnet
        for end in segment.ends:
            addresses[end] = rail_address(subnet, order.index(end.node))
    return addresses


def rail_address(network: ipaddress.IPv4Network, position: int) -> str:
    """The address of the stack's node at `position` (from 0) on a segment: host position+1."""
    return f"{network.network_address + position + 1}/{network.prefixlen}"


def _node_links(
    spec: ClusterSpec,
    fabric: FabricSpec,
    name: str,
    segments: list[_Segment],
    networks: list[ipaddress.IPv4Network | None],
    addresses: dict[_End, str],
) -> tuple[LinkPlan, ...]:
    profile = spec.hardware(spec.node(name))
    netdev_order = [f.netdev for port in profile.ports for f in port.functions]
    links = []
    for segment, network in zip(segments, networks, strict=True):
        for end in (e for e in segment.ends if e.node == name):
            address = addresses.get(end)
            links.append(
                LinkPlan(
                    port=end.port,
                    netdev=end.function.netdev,
                    rdma_device=end.function.rdma_device,
                    mtu=fabric.mtu,
                    addressing=fabric.addressing,
                    address=address,
                    network=str(network) if network else None,
                    peer=_peer(fabric, segment, end),
                    **_peer_fields(fabric, segment, end),
                )
            )
    return tuple(sorted(links, key=lambda link: netdev_order.index(link.netdev)))


def _peer(fabric: FabricSpec, segment: _Segment, end: _End) -> str:
    if segment.switch_port is not None:
        assert fabric.switch is not None
        return f"switch {fabric.switch.name} port {segment.switch_port[end.node]}"
    other = next(e for e in segment.ends if e != end)
    return f"{other.node}:{other.function.netdev}"


def _peer_fields(fabric: FabricSpec, segment: _Segment, end: _End) -> dict[str, str]:
    if segment.switch_port is not None:
        assert fabric.switch is not None
        return {"switch": fabric.switch.name, "switch_port": segment.switch_port[end.node]}
    other = next(e for e in segment.ends if e != end)
    return {"peer_node": other.node, "peer_netdev": other.function.netdev}


def _pings(
    fabric: FabricSpec, segments: list[_Segment], addresses: dict[_End, str]
) -> Iterator[PingCheck]:
    """Cables: one ping per half. Switch rails: a ring, so every lane sends and receives once."""
    for segment in segments:
        ends = segment.ends
        pairs = list(zip(ends, ends[1:] + ends[:1], strict=True)) if len(ends) > 2 else [ends]
        for source, target in pairs:
            yield PingCheck(
                from_node=source.node,
                from_netdev=source.function.netdev,
                to_node=target.node,
                to_netdev=target.function.netdev,
                to_address=addresses[target].split("/")[0] if target in addresses else None,
                payload_bytes=fabric.mtu - ICMP_OVERHEAD,
                crossed=source.port != target.port,
            )


def _cable_peers(spec: ClusterSpec, fabric: FabricSpec) -> dict[str, dict[str, list[str]]]:
    """node -> peer -> the node's ports on the cables NCCL uses to that peer: the first
    `gpus` cables of the pair, in the port order of the pair's first node. Both ends take their
    own end of the SAME cables: a RoCE queue pair leaves by its own port and is not routed, so
    an HCA on another cable than the peer's never connects (FACTS: seed 001's crossed cables
    put spark-2's halves on its port 1)."""
    order = [node.name for node in spec.nodes]
    between: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for cable in fabric.cables:
        ends = sorted(
            [
                (cable.a.node, spec.endpoint_port(cable.a).name),
                (cable.b.node, spec.endpoint_port(cable.b).name),
            ],
            key=lambda end: order.index(end[0]),
        )
        between.setdefault((ends[0][0], ends[1][0]), []).append((ends[0][1], ends[1][1]))
    peers: dict[str, dict[str, list[str]]] = {name: {} for name in order}
    for (first, second), cables in between.items():
        profile = spec.hardware(spec.node(first))
        ports = [port.name for port in profile.ports]
        used = sorted(cables, key=lambda ends: ports.index(ends[0]))[: profile.gpus]
        peers[first][second] = [ends[0] for ends in used]
        peers[second][first] = [ends[1] for ends in used]
    return peers


def _nccl_ports(
    spec: ClusterSpec, fabric: FabricSpec, name: str, peers: dict[str, dict[str, list[str]]]
) -> tuple[str, ...]:
    """Per peer, the ports of the cables chosen for it (one per GPU: a GB10 has one GPU, and
    one port's two PCIe halves already carry all its host bandwidth, so two cables to one peer
    still use one; seed 001: NCCL_IB_HCA=rocep1s0f0,roceP2p1s0f0); a ring node needs a port
    towards each neighbour. Behind a switch, every plugged port."""
    profile = spec.hardware(spec.node(name))
    order = [port.name for port in profile.ports]
    if fabric.switch is not None:
        chosen = {spec.endpoint_port(e).name for _, e in fabric.endpoints() if e.node == name}
    else:
        chosen = {port for ports in peers[name].values() for port in ports}
    return tuple(sorted(chosen, key=order.index))


class Reach(NamedTuple):
    """How a node is reached from another for a bulk copy (images, weights): its address on a
    rail they share; on a DHCP rail, the netdev whose lease the copy reads from the node (a lease
    is not known when the stack is planned); its management address when they share no rail."""

    address: str  # "" when the lease is read at copy time
    lease_netdev: str | None = None


def reach_over_fabric(
    origin: tuple[LinkPlan, ...], links: tuple[LinkPlan, ...], management: str
) -> Reach:
    """How `origin` reaches a node whose fabric `links` are these, fabric first."""
    networks = [ipaddress.ip_interface(link.address).network for link in origin if link.address]
    for link in links:
        address = ipaddress.ip_interface(link.address).ip if link.address else None
        if address is not None and any(address in network for network in networks):
            return Reach(str(address))
    leased = {link.network for link in origin if link.addressing == "dhcp" and link.network}
    for link in links:
        if link.addressing == "dhcp" and link.network in leased:
            return Reach("", link.netdev)
    return Reach(management)

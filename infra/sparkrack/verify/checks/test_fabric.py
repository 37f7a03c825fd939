"""Fabric: every declared port up with its MTU, address and connected route; every cable proven
by a don't-fragment jumbo ping and by who answers at the far end; RDMA devices ready for RoCE v2.
"""

from __future__ import annotations

import ipaddress
from typing import Any

import pytest

from sparkrack.facts.links import LinkState, link_state, macs, routes
from sparkrack.facts.perftest import client_command, parse_write_bw, server_command, write_bw_ports
from sparkrack.facts.ping import arp_reply, jumbo_ping_command, parse_ping
from sparkrack.facts.rdma import gid_attrs, rdma_devices
from sparkrack.facts.sysctl import sysctl_value
from sparkrack.plan.model import NodePlan
from sparkrack.plan.nccl import ROCE_V2_GID_INDEX
from sparkrack.verify.checks.readings import read
from sparkrack.verify.checks.subjects import Cable, Link, Node, Rdma
from sparkrack.verify.inventory import Inventory, connected_network

ROLES = ("fabric",)
PORT_STATE = "ACTIVE"  # what NCCL needs of an RDMA port
GID_INDEX = int(ROCE_V2_GID_INDEX)  # the index NCCL is told (NCCL_IB_GID_INDEX)
GID_TYPE = "RoCE v2"


def link_record(host: Any, netdev: str) -> LinkState:
    found = read(host, link_state(netdev))
    assert found is not None, f"{netdev}: no such port"
    return found


def test_fabric_sysctls(host: Any, node: Node) -> None:
    """ARP answered only by the port that owns the address: on a switch, a box's two ports
    share a broadcast domain and would otherwise both answer (ARP flux)."""
    if not node.node.sysctls:
        pytest.skip(f"{node.node.name} has no fabric links")
    found = {k: read(host, sysctl_value(k)) for k in node.node.sysctls}
    wrong = sorted(
        f"{k} = {found[k] or '?'}, want {v}" for k, v in node.node.sysctls.items() if found[k] != v
    )
    assert not wrong, "; ".join(wrong)


def test_link_up(host: Any, link: Link) -> None:
    """Set up here, and with a carrier: a port up without one names its far end, which is where
    the fault is when a cable is pulled or the peer's port was set down."""
    record, netdev = link_record(host, link.link.netdev), link.link.netdev
    assert record.up, f"{netdev} is set down ({record.operstate}), want UP"
    assert record.operstate == "UP", (
        f"{netdev} is up without a carrier ({record.operstate}): its cable or the far end "
        f"({link.link.peer}) is down"
    )


def test_link_mtu(host: Any, link: Link) -> None:
    mtu = link_record(host, link.link.netdev).mtu
    assert mtu == link.link.mtu, f"{link.link.netdev} MTU {mtu}, want {link.link.mtu}"


def test_link_address(host: Any, link: Link) -> None:
    found = link_record(host, link.link.netdev).addresses
    if link.link.address is None:
        leased = [a for a in found if "." in a]
        assert leased, f"{link.link.netdev}: no DHCP IPv4 address"
        network = connected_network(link.link)
        inside = [a for a in leased if network is None or in_network(a, network)]
        assert inside, f"{link.link.netdev} leased {', '.join(leased)}, outside {network}"
    else:
        want = link.link.address
        has = ", ".join(found) or "no address"
        assert want in found, f"{link.link.netdev} has {has}, want {want}"


def in_network(address: str, network: str) -> bool:
    return ipaddress.ip_interface(address).ip in ipaddress.ip_network(network)


def test_connected_route(host: Any, link: Link) -> None:
    network = connected_network(link.link)
    if network is None:
        pytest.skip(f"{link.link.netdev} is DHCP-addressed without a declared fabric.subnet")
    found = read(host, routes(link.link.netdev))
    connected = [r for r in found if r.destination == network and r.scope == "link"]
    assert connected, f"{link.link.netdev}: no connected route to {network}"


def peer_address(hosts: Any, cable: Cable) -> str:
    if cable.cable.to_address:
        return cable.cable.to_address
    record = link_record(hosts[cable.peer.name], cable.cable.to_netdev)
    found = [a.split("/")[0] for a in record.addresses if "." in a]
    assert found, f"{cable.peer.name}:{cable.cable.to_netdev} has no IPv4 address to ping"
    return found[0]


def test_jumbo_ping(host: Any, hosts: Any, cable: Cable) -> None:
    c = cable.cable
    address = peer_address(hosts, cable)
    # Run, not read: the ping's exit status is its verdict (facts/ping.py parses both).
    result = host.run(jumbo_ping_command(c.from_netdev, address, c.payload_bytes))
    ping = parse_ping(result.stdout, result.rc)
    assert ping.passed, (
        f"{c.from_netdev} -> {c.to_node}:{c.to_netdev} ({address}): no reply to a "
        f"{c.payload_bytes}-byte don't-fragment ping ({ping.detail})"
    )


def test_rdma_write_bandwidth(host: Any, hosts: Any, inventory: Inventory, cable: Cable) -> None:
    """An RDMA write measured across the cable half, from its HCA to the far end's (perftest's
    ib_write_bw; on the simulator its stand-in, TCP through the same ports, flagged SIMULATED):
    the path NCCL's queue pairs take, proven end to end, and at least the stack's floor."""
    c, plan = cable.cable, inventory.plan
    local, remote = rdma_on(cable.node, c.from_netdev), rdma_on(cable.peer, c.to_netdev)
    if local is None or remote is None:
        pytest.skip(f"{c.from_netdev} or {c.to_node}:{c.to_netdev} has no RDMA device")
    address = peer_address(hosts, cable)
    port = write_bw_ports(len(plan.jumbo_pings))[plan.jumbo_pings.index(c)]
    hosts[cable.peer.name].run(server_command(remote, GID_INDEX, port))
    # Run, not read: a test between two nodes (facts/perftest.py parses what it printed).
    written = parse_write_bw(host.run(client_command(local, GID_INDEX, port, address)).stdout)
    where = f"{local} ({c.from_netdev}) -> {c.to_node}:{remote} ({c.to_netdev}, {address})"
    assert written.gbits is not None, f"{where}: no RDMA write measured: {written.detail}"
    assert written.gbits >= plan.rdma_floor_gbps, (
        f"{where}: {written.gbits:g} Gb/s{' (simulated)' if written.simulated else ''}, below "
        f"the stack's floor of {plan.rdma_floor_gbps:g} Gb/s (fabric.rdma_floor_gbps)"
    )


def rdma_on(node: NodePlan, netdev: str) -> str | None:
    return next((link.rdma_device for link in node.links if link.netdev == netdev), None)


def test_cable_peer(host: Any, hosts: Any, cable: Cable) -> None:
    """The address answers from the very netdev the cable map names: a crossed or swapped cable
    can still pass a ping where Linux answers ARP for any local address on any port. Where it
    answers only on the owning port (the fabric's ARP settings), a cable in the peer's other
    port is silent for the planned address, and the port that is there answers for its own."""
    c = cable.cable
    address = peer_address(hosts, cable)
    mac = read(host, arp_reply(c.from_netdev, address))
    others = [a.split("/")[0] for a in (link.address for link in cable.peer.links) if a]
    for other in (a for a in others if a != address):
        mac = mac or read(host, arp_reply(c.from_netdev, other))
    assert mac, f"{c.from_netdev}: no ARP reply from {address} nor from {c.to_node}'s other ports"
    by_mac = read(hosts[cable.peer.name], macs())
    want = f"{c.to_node}:{c.to_netdev}"
    found = f"{c.to_node}:{by_mac[mac]}" if mac in by_mac else f"{mac}, not a port of {c.to_node}"
    assert found == want, f"{c.from_netdev} reaches {found}, but the cable map says {want}"


def test_rdma_device(host: Any, rdma: Rdma) -> None:
    devices = read(host, rdma_devices())
    found = sorted(devices) or "none"
    assert rdma.device in devices, f"no RDMA device {rdma.device} (found {found})"


def test_rdma_port_active(host: Any, rdma: Rdma) -> None:
    state = read(host, rdma_devices()).get(rdma.device, "absent")
    assert state.split(":")[-1].strip() == PORT_STATE, (
        f"{rdma.device} port 1 is {state!r}, want {PORT_STATE}"
    )


def test_rdma_gid_roce_v2(host: Any, rdma: Rdma) -> None:
    gid = read(host, gid_attrs(rdma.device, GID_INDEX))
    kind, netdev, index = gid.kind, gid.netdev, GID_INDEX
    want_kind, want_netdev = GID_TYPE, rdma.netdev
    assert (kind, netdev) == (want_kind, want_netdev), (
        f"{rdma.device} GID {index} is {kind or 'absent'!r} on {netdev or 'no netdev'}, "
        f"want {want_kind!r} on {want_netdev}"
    )

"""What a simulated rack is made of: nodes, their ports, and the cables or switch between them.

Pure data. The planner's output is turned into a SimTopology elsewhere; the two builders here
describe sim-2 and sim-16 for the simulator's own tests.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

# Which network stack the node's OS runs: Debian's own (systemd-networkd), or netplan as on
# Ubuntu and DGX OS (Debian's netplan.io over networkd). The node image is built for each.
NetworkStack = Literal["networkd", "netplan"]

# ConnectX-7 on a GB10: two physical ports, each seen as two PCIe halves (domains 0 and 2).
GB10_NETDEVS = ("enp1s0f0np0", "enp1s0f1np1", "enP2p1s0f0np0", "enP2p1s0f1np1")
GB10_RDMA_DEVICES = ("rocep1s0f0", "rocep1s0f1", "roceP2p1s0f0", "roceP2p1s0f1")
MGMT_SUBNET = "198.18.0.0/24"  # RFC 2544 benchmarking range: never a real network


@dataclass(frozen=True)
class SimNode:
    name: str
    mgmt_address: str
    netdevs: tuple[str, ...] = GB10_NETDEVS
    rdma_devices: tuple[str, ...] = GB10_RDMA_DEVICES
    network_stack: NetworkStack = "networkd"


@dataclass(frozen=True)
class SimCable:
    """A direct cable: node A's port to node B's port (crossed when the port names differ)."""

    a_node: str
    a_port_netdev: str
    b_node: str
    b_port_netdev: str


@dataclass(frozen=True)
class SimLease:
    """What the switch's DHCP server gives one node port: its address, with the prefix."""

    node: str
    netdev: str
    address: str  # CIDR, e.g. 198.19.1.3/24


@dataclass(frozen=True)
class SimSwitch:
    """A switch: each switch port (e.g. a 4-way breakout) lists the (node, netdev) it reaches.
    With leases, a DHCP server on the switch hands them out (the stack's `addressing: dhcp`)."""

    name: str
    ports: tuple[tuple[str, tuple[tuple[str, str], ...]], ...]
    leases: tuple[SimLease, ...] = ()


@dataclass(frozen=True)
class SimTopology:
    stack: str
    nodes: tuple[SimNode, ...]
    cables: tuple[SimCable, ...] = ()
    switch: SimSwitch | None = None
    mgmt_subnet: str = MGMT_SUBNET

    def node(self, name: str) -> SimNode:
        for node in self.nodes:
            if node.name == name:
                return node
        raise KeyError(f"stack {self.stack}: no node {name}")


def rdma_device_for(netdev: str) -> str:
    """rocep1s0f0 for enp1s0f0np0: the RoCE device bound to a ConnectX-7 netdev."""
    stem = netdev[2:].rsplit("np", 1)[0]  # p1s0f0 / P2p1s0f0
    return f"roce{stem}"


def two_node_topology(stack: str = "sim-2", mgmt_prefix: str = "198.18.0") -> SimTopology:
    """sim-2: spark-1 and spark-2, cables crossed (f0 to f1) on both PCIe halves.
    Tests pass another stack and /24 prefix so they never touch a user's running sim-2."""
    nodes = (SimNode("spark-1", f"{mgmt_prefix}.11"), SimNode("spark-2", f"{mgmt_prefix}.12"))
    cables = (
        SimCable("spark-1", "enp1s0f0np0", "spark-2", "enp1s0f1np1"),
        SimCable("spark-1", "enp1s0f1np1", "spark-2", "enp1s0f0np0"),
        SimCable("spark-1", "enP2p1s0f0np0", "spark-2", "enP2p1s0f1np1"),
        SimCable("spark-1", "enP2p1s0f1np1", "spark-2", "enP2p1s0f0np0"),
    )
    return SimTopology(stack=stack, nodes=nodes, cables=cables, mgmt_subnet=f"{mgmt_prefix}.0/24")


def sixteen_node_topology(stack: str = "sim-16", mgmt_prefix: str = "198.18.0") -> SimTopology:
    """sim-16: spark-1..16 behind a 4-port switch, 4 nodes per port, both f0 halves cabled."""
    nodes = tuple(SimNode(f"spark-{i}", f"{mgmt_prefix}.{10 + i}") for i in range(1, 17))
    ports = tuple(
        (
            f"swp{port}",
            tuple(
                (node.name, netdev)
                for node in nodes[(port - 1) * 4 : port * 4]
                for netdev in ("enp1s0f0np0", "enP2p1s0f0np0")
            ),
        )
        for port in range(1, 5)
    )
    switch = SimSwitch("switch", ports)
    return SimTopology(stack, nodes, switch=switch, mgmt_subnet=f"{mgmt_prefix}.0/24")

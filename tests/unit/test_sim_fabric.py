"""Veth naming and wiring, derived from a topology without touching the host."""

from __future__ import annotations

import pytest

from sparkrack.sim.fabric import VethEnd, VethPair, fabric_plan, pair_is_wired
from sparkrack.sim.shell import SimError
from sparkrack.sim.topology import (
    GB10_NETDEVS,
    SimCable,
    SimNode,
    SimTopology,
    rdma_device_for,
    sixteen_node_topology,
    two_node_topology,
)

pytestmark = pytest.mark.unit


def test_sim_2_is_four_crossed_cables_and_nothing_unplugged() -> None:
    pairs = fabric_plan(two_node_topology())
    assert [pair.describe() for pair in pairs] == [
        "spark-1:enp1s0f0np0 <-> spark-2:enp1s0f1np1",
        "spark-1:enp1s0f1np1 <-> spark-2:enp1s0f0np0",
        "spark-1:enP2p1s0f0np0 <-> spark-2:enP2p1s0f1np1",
        "spark-1:enP2p1s0f1np1 <-> spark-2:enP2p1s0f0np0",
    ]
    assert not any(pair.bridged for pair in pairs)


def test_sim_16_puts_both_f0_halves_on_the_switch_and_leaves_f1_unplugged() -> None:
    topology = sixteen_node_topology()
    pairs = fabric_plan(topology)
    bridged = [pair for pair in pairs if pair.bridged]
    unplugged = [pair for pair in pairs if not pair.bridged]
    assert len(bridged) == 32 and len(unplugged) == 32
    assert {pair.a.name for pair in bridged} == {"enp1s0f0np0", "enP2p1s0f0np0"}
    assert {pair.a.name for pair in unplugged} == {"enp1s0f1np1", "enP2p1s0f1np1"}
    assert all(pair.b.node is None for pair in pairs)  # far ends live in the fabric namespace
    assert bridged[0].b.name == "p1m0" and bridged[-1].b.name == "p4m7"
    assert bridged[8].a == VethEnd("spark-5", "enp1s0f0np0")  # switch port 2 starts at spark-5


def test_far_end_names_are_unique_and_fit_a_netdev_name() -> None:
    names = [pair.b.name for pair in fabric_plan(sixteen_node_topology())]
    assert len(set(names)) == len(names)
    assert max(len(name) for name in names) <= 15


def test_every_node_port_appears_exactly_once() -> None:
    topology = sixteen_node_topology()
    ends = [pair.a for pair in fabric_plan(topology)]
    assert sorted((e.node or "", e.name) for e in ends) == sorted(
        (node.name, netdev) for node in topology.nodes for netdev in GB10_NETDEVS
    )


def test_a_port_cabled_twice_is_refused_naming_the_node() -> None:
    nodes = (SimNode("a", "198.18.0.2"), SimNode("b", "198.18.0.3"))
    cables = (
        SimCable("a", "enp1s0f0np0", "b", "enp1s0f0np0"),
        SimCable("a", "enp1s0f0np0", "b", "enp1s0f1np1"),
    )
    with pytest.raises(SimError, match="stack t, node a: enp1s0f0np0 cabled twice"):
        fabric_plan(SimTopology("t", nodes, cables))


@pytest.mark.parametrize(
    ("cable", "message"),
    [
        (SimCable("a", "enp1s0f0np0", "zz", "enp1s0f0np0"), "unknown node zz"),
        (SimCable("a", "eth9", "b", "enp1s0f0np0"), "node a: no port eth9"),
    ],
)
def test_a_cable_to_nowhere_is_refused(cable: SimCable, message: str) -> None:
    nodes = (SimNode("a", "198.18.0.2"), SimNode("b", "198.18.0.3"))
    with pytest.raises(SimError, match=message):
        fabric_plan(SimTopology("t", nodes, (cable,)))


def test_wired_means_each_end_names_the_other() -> None:
    a = {"ifindex": 3, "link_index": 7}
    b = {"ifindex": 7, "link_index": 3}
    assert pair_is_wired(a, b)
    assert not pair_is_wired(a, {"ifindex": 7, "link_index": 4})  # b's peer is elsewhere
    assert not pair_is_wired(a, None)


def test_rdma_device_names_follow_the_netdevs() -> None:
    assert [rdma_device_for(n) for n in GB10_NETDEVS] == [
        "rocep1s0f0",
        "rocep1s0f1",
        "roceP2p1s0f0",
        "roceP2p1s0f1",
    ]


def test_topology_builders_match_the_stacks() -> None:
    two = two_node_topology()
    assert [(n.name, n.mgmt_address) for n in two.nodes] == [
        ("spark-1", "198.18.0.11"),
        ("spark-2", "198.18.0.12"),
    ]
    sixteen = sixteen_node_topology()
    assert sixteen.switch is not None and len(sixteen.switch.ports) == 4
    assert all(len(members) == 8 for _, members in sixteen.switch.ports)  # 4 nodes x 2 halves
    assert sixteen.nodes[-1].mgmt_address == "198.18.0.26"
    assert isinstance(fabric_plan(two)[0], VethPair)

"""sim-16's switch, on the package's fresh rack: sixteen nodes behind one switch.

The switch is one bridge in the stack's fabric namespace: any node's f0 halves reach any other's,
whichever switch port (breakout group) they hang off.
"""

from __future__ import annotations

import pytest

from sparkrack.sim.fabric import BRIDGE, fabric_namespace, links_in
from sparkrack.sim.topology import SimTopology
from tests.e2e.sim_fixtures import ssh

pytestmark = pytest.mark.e2e


def test_every_node_answers_with_systemd_running(sim16: SimTopology) -> None:
    for node in sim16.nodes:
        reply = ssh(sim16.stack, node.name, "hostname; systemctl is-system-running")
        assert reply.split() == [node.name, "running"]


def test_switch_has_one_port_per_cabled_node_port(sim16: SimTopology) -> None:
    links = links_in(fabric_namespace(sim16.stack))
    members = [name for name, link in links.items() if link.get("master") == BRIDGE]
    assert len(members) == 32  # 16 nodes x both f0 halves


@pytest.mark.parametrize(
    ("a", "b", "netdev"),
    [
        (0, 3, "enp1s0f0np0"),  # same switch port (breakout group)
        (0, 15, "enp1s0f0np0"),  # first and last switch ports
        (5, 10, "enP2p1s0f0np0"),  # the second PCIe half
    ],
)
def test_f0_ports_reach_each_other_through_the_switch(
    sim16: SimTopology, a: int, b: int, netdev: str
) -> None:
    first, second = sim16.nodes[a].name, sim16.nodes[b].name
    ends = {first: "169.254.60.1/24", second: "169.254.60.2/24"}
    for node, address in ends.items():
        ssh(
            sim16.stack,
            node,
            f"sudo ip link set {netdev} up && sudo ip link set {netdev} "
            f"mtu 9000 && sudo ip addr add {address} dev {netdev}",
        )
    try:
        ssh(sim16.stack, first, f"arping -c 2 -w 5 -I {netdev} 169.254.60.2")
        ssh(sim16.stack, first, f"ping -c 2 -W 3 -M do -s 8972 -I {netdev} 169.254.60.2")
    finally:
        for node in ends:
            ssh(
                sim16.stack,
                node,
                f"sudo ip addr flush dev {netdev} && sudo ip link set {netdev} down mtu 1500",
            )


def test_an_uncabled_port_exists_and_has_no_carrier(sim16: SimTopology) -> None:
    node = sim16.nodes[6].name
    ssh(sim16.stack, node, "sudo ip link set enp1s0f1np1 up")
    try:
        assert "NO-CARRIER" in ssh(sim16.stack, node, "ip link show enp1s0f1np1")
    finally:
        ssh(sim16.stack, node, "sudo ip link set enp1s0f1np1 down")

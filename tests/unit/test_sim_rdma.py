"""The fake RDMA tree and its counters: 4-byte words, monotonic across veth re-creation; its
ports follow their netdevs as mlx5 ports do."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkrack.sim.rdma import (
    ByteCounter,
    PortLink,
    UpdaterNode,
    counter_values,
    follow_link,
    load_state,
    parse_net_dev,
    parse_routed_netdevs,
    updater_state,
    words,
    write_tree,
)
from sparkrack.sim.topology import SimNode

pytestmark = pytest.mark.unit

NET_DEV = """\
Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:     100       2    0    0    0     0          0         0      100       2    0    0    0     0       0          0
enp1s0f0np0:  123456     789    0    0    0     0          0         0   987654     321    0    0    0     0       0          0
"""  # noqa: E501


def test_counters_count_four_byte_words() -> None:
    assert words(0) == 0 and words(3) == 0 and words(4) == 1 and words(4001) == 1000
    values = counter_values(rx_bytes=400, rx_packets=5, tx_bytes=8000, tx_packets=9)
    assert values == {
        "port_xmit_data": 2000,
        "port_rcv_data": 100,
        "port_xmit_packets": 9,
        "port_rcv_packets": 5,
    }


def test_a_recreated_veth_does_not_make_the_counter_go_back() -> None:
    counter = ByteCounter().advance(1000).advance(5000)
    assert counter.total == 5000
    restarted = counter.advance(200)  # the node container was recreated: veth starts at 0
    assert restarted.total == 5200
    assert restarted.advance(300).total == 5300


def test_proc_net_dev_is_read_per_netdev() -> None:
    stats = parse_net_dev(NET_DEV)
    assert stats["enp1s0f0np0"] == (123456, 789, 987654, 321)
    assert stats["lo"] == (100, 2, 100, 2)


def test_tree_has_what_the_checks_and_nccl_read(tmp_path: Path) -> None:
    """At boot: the port down and only its link-local GIDs (no fabric configured yet)."""
    write_tree(tmp_path, SimNode("spark-1", "198.18.0.11"))
    port = tmp_path / "roceP2p1s0f1" / "ports" / "1"
    assert (port / "state").read_text() == "1: DOWN\n"
    assert (port / "phys_state").read_text() == "3: Disabled\n"
    assert (port / "rate").read_text() == "200 Gb/sec (4X HDR)\n"
    assert (port / "gid_attrs" / "types" / "1").read_text() == "RoCE v2\n"
    assert (port / "gid_attrs" / "ndevs" / "1").read_text() == "enP2p1s0f1np1\n"
    assert not (port / "gid_attrs" / "types" / "3").exists()
    assert (port / "counters" / "port_xmit_data").read_text() == "0\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "roceP2p1s0f0",
        "roceP2p1s0f1",
        "rocep1s0f0",
        "rocep1s0f1",
    ]


def test_rewriting_the_tree_keeps_live_counters(tmp_path: Path) -> None:
    node = SimNode("spark-1", "198.18.0.11")
    write_tree(tmp_path, node)
    counter = tmp_path / "rocep1s0f0" / "ports" / "1" / "counters" / "port_rcv_data"
    counter.write_text("42\n")
    write_tree(tmp_path, node)
    assert counter.read_text() == "42\n"


def test_updater_state_round_trips(tmp_path: Path) -> None:
    nodes = [UpdaterNode("sparkrack-sim-2-spark-1", tmp_path, (("rocep1s0f0", "enp1s0f0np0"),))]
    state = tmp_path / "state.json"
    state.write_text(updater_state(nodes))
    assert load_state(state) == nodes


ROUTES = """\
Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT
eth0\t000012C6\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0
enp1s0f0np0\t000013C6\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0
"""


def test_routed_netdevs_are_those_with_a_route_of_their_own() -> None:
    assert parse_routed_netdevs(ROUTES) == {"eth0", "enp1s0f0np0"}


def test_the_port_follows_its_netdev_up_with_an_address_down_without(tmp_path: Path) -> None:
    write_tree(tmp_path, SimNode("spark-1", "198.18.0.11"))
    device = tmp_path / "rocep1s0f0"
    port, gids = device / "ports" / "1", device / "ports" / "1" / "gid_attrs"

    follow_link(device, "enp1s0f0np0", PortLink(up=True, ipv4=False))
    assert (port / "state").read_text() == "4: ACTIVE\n"
    assert not (gids / "types" / "3").exists()  # up, no address yet: no IPv4 GID

    follow_link(device, "enp1s0f0np0", PortLink(up=True, ipv4=True))
    assert (gids / "types" / "3").read_text() == "RoCE v2\n"
    assert (gids / "ndevs" / "3").read_text() == "enp1s0f0np0\n"
    assert (gids / "types" / "2").read_text() == "IB/RoCE v1\n"

    follow_link(device, "enp1s0f0np0", PortLink(up=False, ipv4=False))
    assert (port / "state").read_text() == "1: DOWN\n"
    assert (port / "phys_state").read_text() == "3: Disabled\n"
    assert not (gids / "types" / "3").exists() and not (gids / "ndevs" / "2").exists()
    assert (gids / "types" / "1").read_text() == "RoCE v2\n"  # link-local ones stay

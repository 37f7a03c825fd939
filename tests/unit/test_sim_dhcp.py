"""The switch's DHCP server as the simulator configures dnsmasq, computed without a host."""

from __future__ import annotations

import pytest

from sparkrack.sim import dhcp
from sparkrack.sim.topology import SimLease

pytestmark = pytest.mark.unit

LEASES = (
    SimLease("spark-01", "enp1s0f0np0", "198.19.0.1/24"),
    SimLease("spark-01", "enP2p1s0f0np0", "198.19.1.1/24"),
    SimLease("spark-02", "enp1s0f0np0", "198.19.0.2/24"),
)
MACS = {lease: f"02:00:00:00:00:0{i}" for i, lease in enumerate(LEASES)}


def test_the_server_holds_the_last_host_of_each_rail() -> None:
    assert [str(a) for a in dhcp.leased_networks(LEASES)] == ["198.19.0.254/24", "198.19.1.254/24"]


def test_each_port_is_leased_its_address_by_its_mac_and_nothing_else() -> None:
    lines = dhcp.server_config("sim-16", LEASES, MACS).splitlines()

    assert "dhcp-range=198.19.0.0,static,255.255.255.0,12h" in lines
    assert "dhcp-range=198.19.1.0,static,255.255.255.0,12h" in lines
    assert [line for line in lines if line.startswith("dhcp-host=")] == [
        "dhcp-host=02:00:00:00:00:00,198.19.0.1",
        "dhcp-host=02:00:00:00:00:01,198.19.1.1",
        "dhcp-host=02:00:00:00:00:02,198.19.0.2",
    ]
    # no DNS, and no default route through the switch
    assert "port=0" in lines and "dhcp-option=option:router" in lines

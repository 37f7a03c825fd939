"""The node fence (plan/fence.py) and its table's reader (facts/nft.py): who may reach which
planned port, the stack's client networks and their refusals, and the Plan's rules exactly what
nft reads back after loading the Plan's script."""

from __future__ import annotations

import ipaddress

import pytest

from sparkrack.facts.nft import parse_table
from sparkrack.plan.fence import FENCE_TABLE, address_intervals, merged, port_set
from sparkrack.resources.firewall import NftTableProvider, unit_name
from tests.unit.support import captured_output, cluster, plan_of, refusal

pytestmark = pytest.mark.unit


def captured(case: str) -> str:
    return captured_output(f"nft.nft_table.{case}")


def test_touching_port_ranges_merge_as_nft_keeps_them() -> None:
    assert merged([(52400, 52599), (6379, 6379), (52370, 52370), (52369, 52369)]) == (
        (6379, 6379),
        (52369, 52370),
        (52400, 52599),
    )
    assert port_set(((6379, 6379),)) == "6379"
    assert port_set(((6379, 6379), (52369, 52370))) == "{ 6379, 52369-52370 }"


def test_the_plans_rules_are_what_nft_reads_back_after_loading_its_script() -> None:
    # The golden is nft 1.0.6's JSON of this script (see its note).
    head = plan_of("sim-2", cluster("sim-2")).node("spark-1")
    assert parse_table(captured("fence-beside-another-table"), "inet", FENCE_TABLE) == (
        head.fence.rules
    )
    for rule in head.fence.rules[1:]:
        assert f"\t\t{rule}\n" in head.fence.script


RACK = (
    "{ 198.18.0.11-198.18.0.12, 198.19.0.1-198.19.0.2, 198.19.1.1-198.19.1.2, "
    "198.19.2.1-198.19.2.2, 198.19.3.1-198.19.3.2 }"
)


def test_ray_and_the_exporters_admit_the_rack_the_api_and_prometheus_its_clients_too() -> None:
    plan = plan_of("sim-2", cluster("sim-2"))
    head, worker = plan.node("spark-1").fence, plan.node("spark-2").fence
    exporters = ((8080, 8080), (9100, 9100), (9835, 9835))
    ray = ((52365, 52370), (52400, 52599))
    assert head.rack_ports == ((6379, 6379), *exporters, *ray)
    assert head.client_ports == ((8000, 8000), (9090, 9090))
    assert worker.rack_ports == (*exporters, *ray)
    assert worker.client_ports == ()
    # every node's management address and both ends of every cable half: the rack
    assert head.rules[3] == (
        "tcp dport { 6379, 8080, 9100, 9835, 52365-52370, 52400-52599 } "
        f"ip daddr 198.18.0.11 ip saddr {RACK} accept"
    )
    # the default client network, the management /24, holds both nodes' addresses
    assert head.clients[0] == "198.18.0.0/24" and head.clients[1:] == head.rack[1:]
    assert head.rules[-1] == (
        "tcp dport { 6379, 8000, 8080, 9090, 9100, 9835, 52365-52370, 52400-52599 } "
        "reject with tcp reset"
    )
    assert len(worker.rules) == 5  # nothing for clients on a worker: the rack's, then reset


def test_declared_client_networks_replace_the_default() -> None:
    raw = cluster("sim-2")
    raw["client_networks"] = ["10.20.0.0/16", "198.18.0.128/25", "fd00:1::/64"]
    head = plan_of("sim-2", raw).node("spark-1").fence
    assert head.clients[0] == "10.20.0.0/16"
    assert "198.18.0.128/25" in head.clients and "198.18.0.0/24" not in head.clients
    assert not any(":" in each for each in head.clients)  # IPv6: never an `ip saddr`
    assert "198.18.0.11-198.18.0.12" in head.clients  # the rack, always


def test_intervals_are_joined_and_written_as_nft_lists_them() -> None:
    networks = [ipaddress.ip_network(each) for each in ("10.0.0.5", "10.0.0.0/24", "10.0.1.0/24")]
    assert address_intervals(networks) == ("10.0.0.0/23",)
    touching = [ipaddress.ip_network(each) for each in ("10.0.0.7", "10.0.0.8", "10.0.0.20")]
    assert address_intervals(touching) == ("10.0.0.7-10.0.0.8", "10.0.0.20")


@pytest.mark.parametrize(
    ("network", "says"),
    [
        ("0.0.0.0/0", "0.0.0.0/0 holds unspecified addresses, which no client has"),
        ("127.0.0.0/8", "holds loopback addresses"),
        ("169.254.0.0/16", "holds link-local addresses"),
        ("224.0.0.0/4", "holds multicast addresses"),
        ("::/0", "holds unspecified addresses"),
        ("10.0.0.5/24", "has host bits set"),
        ("office-lan", "is not a network in CIDR form"),
    ],
)
def test_a_client_network_no_client_is_on_is_refused_naming_the_field(
    network: str, says: str
) -> None:
    raw = cluster("sim-2")
    raw["client_networks"] = ["10.1.0.0/16", network]
    message = refusal("sim-2", raw)
    assert message.startswith("stack sim-2: client_networks[1]: "), message
    assert says in message and len(message.splitlines()) == 1


def test_an_empty_list_of_client_networks_is_refused() -> None:
    raw = cluster("sim-2")
    raw["client_networks"] = []
    assert refusal("sim-2", raw).startswith("stack sim-2: client_networks: ")


def test_a_node_named_by_host_name_is_refused_the_fence_admits_addresses() -> None:
    raw = cluster("sim-2")
    raw["nodes"][1]["address"] = "spark-2.lan"
    message = refusal("sim-2", raw)
    assert message.startswith("stack sim-2: nodes[1] (spark-2).address: spark-2.lan is a host name")


def test_an_ipv6_rack_is_matched_as_one() -> None:
    raw = cluster("sim-2")
    for i, node in enumerate(raw["nodes"]):
        node["address"] = f"fd00::{i + 11}"
    head = plan_of("sim-2", raw).node("spark-1").fence
    assert head.rules[3].endswith(" ip6 daddr fd00::11 ip6 saddr fd00::11-fd00::12 accept")
    assert head.rules[4].endswith(" ip6 saddr fd00::/64 accept")  # the default: the /64


def test_a_flushed_or_missing_table_reads_as_such() -> None:
    flushed = parse_table(captured("flushed-by-hand"), "inet", FENCE_TABLE)
    assert flushed == ("chain input", "type filter hook input priority filter; policy accept;")
    assert parse_table(captured("absent"), "inet", FENCE_TABLE) is None


def test_a_rule_edited_by_hand_reads_as_edited() -> None:
    fence = captured("fence-beside-another-table")
    dropped = parse_table(fence.replace('"accept": null', '"drop": null', 1), "inet", FENCE_TABLE)
    assert dropped is not None and dropped[2] == 'iif "lo" drop'
    counted = fence.replace('{"accept": null}', '{"counter": {"packets": 0}}, {"accept": null}', 1)
    unknown = parse_table(counted, "inet", FENCE_TABLE)  # an expression this reader does not know
    assert unknown is not None and unknown[2] == 'iif "lo" {"counter": {"packets": 0}} accept'


def test_the_provider_refuses_a_table_name_that_could_reach_a_shell() -> None:
    provider = NftTableProvider()
    bad = {"family": "inet", "table": "x; reboot", "rules": [], "script": ""}
    assert [f.property for f in provider.validate(bad)] == ["table"]
    assert [f.property for f in provider.validate({**bad, "family": "arp"})] == ["family"]
    assert unit_name(FENCE_TABLE) == "sparkrack-nft-sparkrack-ray-fence.service"

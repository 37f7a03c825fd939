"""The fence for Ray's every-address ports (plan/fence.py) and its table's reader (facts/nft.py):
the Plan's rules are exactly what real nft reads back after loading the Plan's script."""

from __future__ import annotations

import pytest

from sparkrack.facts.nft import parse_table
from sparkrack.plan.fence import FENCE_TABLE, Fence, merged, port_set
from sparkrack.resources.firewall import NftTableProvider, unit_name
from tests.unit.support import captured_output, cluster, plan_of

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
    # The golden's output was captured from nft 1.0.6 after `nft -f` of this very script.
    head = plan_of("sim-2", cluster("sim-2")).node("spark-1")
    assert parse_table(captured("fence-beside-another-table"), "inet", FENCE_TABLE) == (
        head.ray_fence.rules
    )
    for rule in head.ray_fence.rules[1:]:
        assert f"\t\t{rule}\n" in head.ray_fence.script


def test_a_worker_fences_its_managers_and_workers_and_the_head_its_gcs_too() -> None:
    plan = plan_of("sim-2", cluster("sim-2"))
    assert plan.node("spark-1").ray_fence.ports == ((6379, 6379), (52369, 52370), (52400, 52599))
    assert plan.node("spark-2").ray_fence.ports == ((52369, 52370), (52400, 52599))


def test_an_ipv6_address_is_matched_as_one() -> None:
    fence = Fence(address="fd00::11", ports=((6379, 6379),))
    assert "tcp dport 6379 ip6 daddr fd00::11 accept" in fence.rules


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

"""`sparkrack inventory` from the Plan, and the verify table: nodes across, failures named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sparkrack.cli import main
from sparkrack.config.load import load_stack_file
from sparkrack.plan import Plan, make_plan
from sparkrack.transport.target import Target
from sparkrack.verify.checks.conftest import node_of_test_id
from sparkrack.verify.inventory import connected_network
from sparkrack.verify.table import render

pytestmark = pytest.mark.unit


def test_inventory_carries_the_plan_itself_and_the_deployed_roles(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The checks read the Plan's own models: the inventory is the Plan, whole, not a copy."""
    handed = tmp_path / "plan.json"
    handed.write_text(make_plan(load_stack_file("sim-2")).model_dump_json())
    args = ["inventory", "--plan", str(handed), "--roles", "fabric", "--image-id", "sha256:ab"]
    assert main(args) == 0
    inventory = json.loads(capsys.readouterr().out)
    assert set(inventory) == {"plan", "roles", "unavailable", "engine_image_id"}
    assert inventory["engine_image_id"] == "sha256:ab"  # what up hands: the head's image
    plan = Plan.model_validate(inventory["plan"])
    assert plan == make_plan(load_stack_file("sim-2"))
    spark2 = plan.node("spark-2")
    assert (spark2.address, spark2.links[0].netdev, spark2.links[0].mtu) == (
        "198.18.0.12",
        "enp1s0f0np0",
        9000,
    )
    assert connected_network(spark2.links[0]) == "198.19.2.0/24"
    assert Target.for_node(spark2).known_hosts.endswith("sim/sim-2/known_hosts")
    cable = plan.jumbo_pings[0]
    assert (cable.from_node, cable.to_node, cable.to_address, cable.payload_bytes) == (
        "spark-1",
        "spark-2",
        "198.19.0.2",
        8972,
    )
    assert inventory["roles"] == ["fabric"]


def test_an_unknown_role_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inventory", "--plan", "-", "--roles", "fabrik"]) == 2
    assert "unknown role 'fabrik'" in capsys.readouterr().err


def result(node: str, id_: str, outcome: str, detail: str = "") -> dict[str, str]:
    return {
        "node": node,
        "id": id_,
        "check": id_.split("[")[0],
        "category": "fabric",
        "outcome": outcome,
        "detail": detail,
    }


def test_table_shows_each_node_and_names_the_failure() -> None:
    results = [
        result("spark-1", "test_link_mtu[spark-1-a]", "passed"),
        result("spark-1", "test_link_mtu[spark-1-b]", "passed"),
        result("spark-2", "test_link_mtu[spark-2-a]", "failed", "a MTU 1500, want 9000"),
        result("spark-2", "test_link_mtu[spark-2-b]", "passed"),
        result("spark-1", "test_nic_irq_affinity[spark-1]", "skipped", "declares nic_irqs: none"),
    ]
    table = render("sim-2", ["spark-1", "spark-2"], results, 2.0)
    rows = table.splitlines()
    assert rows[0].split() == ["CATEGORY", "CHECK", "spark-1", "spark-2"]
    assert rows[1].split() == ["fabric", "test_link_mtu", "PASS", "2/2", "FAIL", "1/2"]
    assert "FAIL spark-2 test_link_mtu[spark-2-a]: a MTU 1500, want 9000" in rows
    assert "SKIP 1 x declares nic_irqs: none" in rows
    assert rows[-1] == "stack sim-2: FAILED: 3 passed, 1 failed, 1 skipped in 2.0 s"


@pytest.mark.parametrize(
    ("nodeid", "node"),
    [
        ("tests/infra/test_fabric.py::test_link_mtu[spark-10-enp1s0f0np0]", "spark-10"),
        ("tests/infra/test_fabric.py::test_link_mtu[spark-1-enp1s0f0np0]", "spark-1"),
        ("tests/infra/test_cpu.py::test_irqs_off_compute[spark-2]", "spark-2"),
        ("tests/infra/test_monitoring.py::test_prometheus_targets[spark-1]", "spark-1"),
        ("tests/infra/test_inference.py::test_ray_cluster", "cluster"),
    ],
)
def test_a_nodes_checks_share_one_worker(nodeid: str, node: str) -> None:
    names = sorted(["spark-1", "spark-2", "spark-10"], key=len, reverse=True)
    assert node_of_test_id(nodeid, names) == node

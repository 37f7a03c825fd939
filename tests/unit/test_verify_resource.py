"""The verification that ends `pulumi up`: a pulumi_command local Command whose line runs this
interpreter's `sparkrack verify` on the deployed digest, and whose summary names what failed."""

from __future__ import annotations

import shlex
import sys

import pytest

from sparkrack.cli import main
from sparkrack.resources.verification import TIMEOUT_S, verify_command
from sparkrack.verify.inventory import Inventory
from sparkrack.verify.runner import Verification, inventory_for

pytestmark = pytest.mark.unit

PASSED = {"id": "test_link_mtu[spark-1-enp1s0f0np0]", "node": "spark-1", "outcome": "passed"}
FAILED = {
    "id": "test_link_mtu[spark-2-enp1s0f0np0]",
    "node": "spark-2",
    "outcome": "failed",
    "detail": "enp1s0f0np0 MTU 1500, want 9000",
}


def outcome(results: list[dict[str, str]]) -> Verification:
    inventory: Inventory = inventory_for("sim-2")
    return Verification(inventory, results, seconds=2.5, exit_status=0, output="")


def test_the_command_runs_this_interpreters_verify_on_the_deployed_digest() -> None:
    line = verify_command("sim-2", "d1", "/srv/my project/stacks")
    words = shlex.split(line)
    assert words[:3] == ["timeout", str(TIMEOUT_S), sys.executable]
    assert words[3:] == [
        *("-m", "sparkrack.cli", "verify", "--stack", "sim-2", "--summary", "--digest", "d1"),
        *("--stacks-dir", "/srv/my project/stacks"),
    ]


def test_a_stack_name_cannot_break_out_of_the_command_line() -> None:
    words = shlex.split(verify_command("sim-2; touch /tmp/x", "d1", None))
    assert words[words.index("--stack") + 1] == "sim-2; touch /tmp/x"


def test_summary_counts_a_clean_run() -> None:
    assert (
        outcome([PASSED]).summary() == "stack sim-2: passed: 1 passed, 0 failed, 0 skipped in 2.5 s"
    )


def test_summary_names_each_failing_node_and_check() -> None:
    text = outcome([PASSED, FAILED]).summary()
    assert text.splitlines() == [
        "FAIL spark-2 test_link_mtu[spark-2-enp1s0f0np0]: enp1s0f0np0 MTU 1500, want 9000",
        "stack sim-2: FAILED: 1 passed, 1 failed, 0 skipped in 2.5 s",
    ]


def test_summary_says_how_many_more_failed_than_it_shows() -> None:
    text = outcome([FAILED] * 3).summary(shown=2)
    assert text.splitlines()[-2] == "... and 1 more (sparkrack verify --stack sim-2)"


def test_verify_refuses_a_plan_other_than_the_one_deployed(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["verify", "--stack", "sim-2", "--digest", "0123abcd"]) == 2
    error = capsys.readouterr().err
    assert "stack sim-2 now plans digest" in error
    assert "not the 0123abcd deployed: run `pulumi up` again" in error

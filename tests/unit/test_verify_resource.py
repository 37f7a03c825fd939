"""The verification that ends `pulumi up`: a pulumi_command local Command whose line runs this
interpreter's `sparkrack verify` on the Plan it is handed, and whose summary names what failed."""

from __future__ import annotations

import shlex
import sys

import pytest

from sparkrack.config.load import load_stack_file
from sparkrack.plan import make_plan
from sparkrack.resources.verification import TIMEOUT_S, verify_command
from sparkrack.verify.inventory import build_inventory
from sparkrack.verify.runner import Verification

pytestmark = pytest.mark.unit

PASSED = {"id": "test_link_mtu[spark-1-enp1s0f0np0]", "node": "spark-1", "outcome": "passed"}
FAILED = {
    "id": "test_link_mtu[spark-2-enp1s0f0np0]",
    "node": "spark-2",
    "outcome": "failed",
    "detail": "enp1s0f0np0 MTU 1500, want 9000",
}


def outcome(results: list[dict[str, str]]) -> Verification:
    inventory = build_inventory(make_plan(load_stack_file("sim-2")))
    return Verification(inventory, results, seconds=2.5, exit_status=0, output="")


def test_the_command_runs_this_interpreters_verify_on_the_plan_on_its_stdin() -> None:
    """Nothing of the stack is on the shell line: the Plan comes on stdin, as JSON."""
    words = shlex.split(verify_command())
    assert words[:3] == ["timeout", str(TIMEOUT_S), sys.executable]
    assert words[3:] == ["-m", "sparkrack.cli", "verify", "--plan", "-", "--summary"]


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

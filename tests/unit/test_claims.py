"""Another stack's nodes (issue 34, item 6): what a stack claims, which of its nodes another
stack's Plan would take and the one line that refuses it; `takeover`; the backend read through
the Pulumi CLI (a fake `pulumi` on PATH answers as the real one did); `sparkrack plan`."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from sparkrack.cli import main
from sparkrack.ops import claims as backend_claims
from sparkrack.plan.claims import Claims, NodeClaim, claimed_problems, plan_claims, refuse_claimed
from sparkrack.stackspec.cluster import MAX_TAKEOVER
from sparkrack.stackspec.errors import SpecError

from .support import SHIPPED, STACKS, cluster, named_model, plan_of, refusal, stacks_dir_with

pytestmark = pytest.mark.unit

SIM2 = plan_of("sim-2", cluster("sim-2"))  # spark-1 198.18.0.11, spark-2 198.18.0.12


def holding(*nodes: tuple[str, str]) -> Claims:
    return Claims(nodes=tuple(NodeClaim(name=name, address=address) for name, address in nodes))


def refused_lines(plan: Any, others: dict[str, Claims]) -> list[str]:
    with pytest.raises(SpecError) as refused:
        refuse_claimed(plan, others)
    return str(refused.value).splitlines()


def test_a_node_another_stack_claims_is_refused_in_one_line_naming_both() -> None:
    lines = refused_lines(SIM2, {"lab-2": holding(("box-a", "198.18.0.12"))})
    assert lines == [
        "stack sim-2: nodes[1] (spark-2).address: 198.18.0.12 is claimed by stack lab-2 (its"
        " box-a): an `up` would reconfigure that rack; add lab-2 to `takeover` to take the node"
        " over"
    ]


def test_a_copy_of_a_deployed_stack_under_another_name_is_refused_on_every_node() -> None:
    copy = plan_of("sim-2-copy", cluster("sim-2"))
    problems = claimed_problems(copy, {"sim-2": plan_claims(SIM2)})
    assert [problem.path for problem in problems] == [
        "nodes[0] (spark-1).address",
        "nodes[1] (spark-2).address",
    ]


def test_each_stack_claiming_a_node_is_named() -> None:
    others = {"b-rack": holding(("x", "198.18.0.11")), "a-rack": holding(("y", "198.18.0.11"))}
    lines = refused_lines(SIM2, others)
    assert [line.split("claimed by ")[1].split(" ")[1] for line in lines] == ["a-rack", "b-rack"]


def test_takeover_lets_a_stack_take_the_nodes_of_the_stacks_it_names_only() -> None:
    raw = cluster("sim-2") | {"takeover": ["lab-2"]}
    taking = plan_of("sim-2", raw)
    assert claimed_problems(taking, {"lab-2": plan_claims(SIM2)}) == []
    others = {"lab-2": plan_claims(SIM2), "lab-3": holding(("z", "198.18.0.11"))}
    assert [p.message.split(" (")[0] for p in claimed_problems(taking, others)] == [
        "198.18.0.11 is claimed by stack lab-3"
    ]


def test_a_stack_is_not_refused_its_own_nodes_nor_nodes_no_other_stack_claims() -> None:
    others = {"sim-2": plan_claims(SIM2), "sim-16": holding(("spark-1", "198.18.0.111"))}
    assert claimed_problems(SIM2, others) == []


def test_node_names_that_repeat_across_racks_are_no_claim() -> None:
    """sim-2 and gb10-2 name the same nodes and cable ends on other addresses."""
    gb10 = plan_of("gb10-2", cluster("gb10-2"))
    assert [node.name for node in gb10.nodes] == [node.name for node in SIM2.nodes]
    assert claimed_problems(SIM2, {"gb10-2": plan_claims(gb10)}) == []


def test_the_shipped_stacks_share_one_backend_without_a_claim_on_each_other() -> None:
    """As `scripts/dev up sim-2` and `scripts/dev up sim-16` do, on one machine's state."""
    plans = {stack: plan_of(stack, named_model(stack)) for stack in SHIPPED}
    claims = {stack: plan_claims(plan) for stack, plan in plans.items()}
    assert {stack: claimed_problems(plan, claims) for stack, plan in plans.items()} == {
        stack: [] for stack in SHIPPED
    }


@pytest.mark.parametrize("recorded", ["SPARK-2.LAB.EXAMPLE.", "spark-2.lab.example"])
def test_a_host_name_is_one_node_in_any_case_and_with_its_root_dot(recorded: str) -> None:
    # A stack naming a node by host name is refused at plan (the node fence admits addresses):
    # a rack recorded before that rule, or by hand, may still hold one.
    plan = plan_of("sim-2", cluster("sim-2"))
    named = plan.nodes[1].model_copy(update={"address": "Spark-2.lab.example"})
    plan = plan.model_copy(update={"nodes": (plan.nodes[0], named)})
    assert len(claimed_problems(plan, {"lab-2": holding(("n", recorded))})) == 1


def test_the_claims_output_is_the_plans_nodes_and_addresses_as_plain_json() -> None:
    assert plan_claims(SIM2).model_dump(mode="json") == {
        "nodes": [
            {"name": "spark-1", "address": "198.18.0.11"},
            {"name": "spark-2", "address": "198.18.0.12"},
        ]
    }


@pytest.mark.parametrize(
    ("takeover", "says"),
    [
        (["sim-2"], "stack sim-2: takeover[0]: sim-2 is this stack: name another stack"),
        (["lab-2", "lab-2"], "stack sim-2: takeover[1]: lab-2 is named twice"),
        (["lab 2"], "stack sim-2: takeover[0]: "),
        ([f"lab-{i}" for i in range(MAX_TAKEOVER + 1)], "stack sim-2: takeover: "),
    ],
)
def test_a_takeover_list_is_checked_and_bounded(takeover: list[str], says: str) -> None:
    message = refusal("sim-2", cluster("sim-2") | {"takeover": takeover})
    assert message.startswith(says), message
    assert len(message.splitlines()) == 1, message


# --- the backend read: a fake `pulumi` on PATH answering what the real CLI printed ---------------

FAKE_PULUMI = """#!{python}
import json, os, sys
args = sys.argv[1:]
with open(os.environ["FAKE_PULUMI_LOG"], "a") as log:
    log.write(json.dumps({{"args": args, "cwd": os.getcwd(),
                          "skip": os.environ.get("PULUMI_SKIP_UPDATE_CHECK")}}) + "\\n")
backend = json.load(open(os.environ["FAKE_PULUMI_BACKEND"]))
if args[:3] == ["stack", "ls", "--json"]:
    print(json.dumps(backend["ls"]))
elif args[:3] == ["stack", "output", "--json"]:
    stack = args[args.index("--stack") + 1]
    if stack not in backend["outputs"]:
        sys.exit("error: no stack named '" + stack + "' found")
    print(json.dumps(backend["outputs"][stack]))
else:
    sys.exit("unexpected: " + " ".join(args))
"""


def fake_backend(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, backend: dict[str, Any]) -> Path:
    """A `pulumi` first on PATH that answers from `backend`; returns the log of its calls."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "pulumi"
    fake.write_text(FAKE_PULUMI.format(python=sys.executable))
    fake.chmod(0o755)
    (tmp_path / "backend.json").write_text(json.dumps(backend))
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_PULUMI_BACKEND", str(tmp_path / "backend.json"))
    monkeypatch.setenv("FAKE_PULUMI_LOG", str(tmp_path / "calls.log"))
    return tmp_path / "calls.log"


def calls(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


# As `pulumi stack ls --json` printed it for a file backend (v3.274.1): a stack made by
# `stack init` and never deployed counts 0 resources.
LISTED = [
    {
        "name": "sim-2",
        "current": True,
        "lastUpdate": "2026-12-06T18:36:18.151Z",
        "resourceCount": 9,
    },
    {"name": "lab-2", "current": False, "lastUpdate": "2026-12-06T18:36:11Z", "resourceCount": 40},
    {"name": "fresh", "current": False, "lastUpdate": "2026-12-06T18:36:12Z", "resourceCount": 0},
]
LAB2 = {"claims": {"nodes": [{"name": "box-a", "address": "198.18.0.12"}]}, "token": "[secret]"}


def test_the_other_deployed_stacks_claims_are_read_with_one_call_each(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = fake_backend(tmp_path, monkeypatch, {"ls": LISTED, "outputs": {"lab-2": LAB2}})
    found = backend_claims.other_claims("sim-2", tmp_path)
    assert found.claims == {"lab-2": holding(("box-a", "198.18.0.12"))}
    assert found.unread == []
    made = calls(log)
    assert [call["args"] for call in made] == [
        ["stack", "ls", "--json", "--non-interactive"],
        ["stack", "output", "--json", "--stack", "lab-2", "--non-interactive"],
    ]
    assert {(call["cwd"], call["skip"]) for call in made} == {(str(tmp_path), "true")}


def test_a_backend_with_no_other_deployed_stack_costs_one_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = fake_backend(tmp_path, monkeypatch, {"ls": LISTED[:1] + LISTED[2:], "outputs": {}})
    assert backend_claims.other_claims("sim-2", tmp_path) == backend_claims.OtherClaims()
    assert len(calls(log)) == 1


def test_what_cannot_be_read_is_said_per_stack_and_the_rest_is_compared(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    listed = [
        *LISTED,
        {"name": "gone", "resourceCount": 3},
        {"name": "old", "resourceCount": 5},
        {"name": "odd", "resourceCount": 5},
    ]
    outputs = {"lab-2": LAB2, "old": {"nodes": ["spark-1"]}, "odd": {"claims": ["10.0.0.1"]}}
    fake_backend(tmp_path, monkeypatch, {"ls": listed, "outputs": outputs})
    found = backend_claims.other_claims("sim-2", tmp_path)
    assert list(found.claims) == ["lab-2"]
    assert found.unread == [
        "stack gone: `pulumi stack output --json --stack gone` failed: error: no stack named"
        " 'gone' found; its nodes are not compared",
        "stack old records no claims (its last `up` predates them, or failed): its nodes are not"
        " compared",
        "stack odd: its `claims` output is not a list of claims; its nodes are not compared",
    ]


def test_without_the_pulumi_cli_nothing_is_compared_and_that_is_said(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    found = backend_claims.other_claims("sim-2", tmp_path)
    assert found.claims == {}
    assert found.unread == [
        "the other stacks were not listed: the pulumi CLI is not on PATH (scripts/dev puts the"
        " one it built there); no node is compared"
    ]


def test_stacks_listed_by_their_organization_and_project_are_known_by_their_own_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pulumi Cloud lists `org/project/stack`: the running stack is left out by its name, and
    what two organizations' stacks of one name claim is compared as one `takeover` names it."""
    listed = [
        {"name": f"{org}/sparkrack/{stack}"} for org in ("a", "b") for stack in ("sim-2", "lab-2")
    ]
    outputs = {
        "a/sparkrack/lab-2": LAB2,
        "b/sparkrack/lab-2": {"claims": {"nodes": [{"name": "box-b", "address": "10.0.0.1"}]}},
    }
    log = fake_backend(tmp_path, monkeypatch, {"ls": listed, "outputs": outputs})
    found = backend_claims.other_claims("sim-2", tmp_path)
    assert found.claims == {"lab-2": holding(("box-a", "198.18.0.12"), ("box-b", "10.0.0.1"))}
    assert sorted(call["args"][4] for call in calls(log)[1:]) == list(outputs)


# --- `sparkrack plan` -------------------------------------------------------------------------


def test_plan_refuses_a_claimed_node_when_the_environment_names_a_backend(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    log = fake_backend(tmp_path, monkeypatch, {"ls": LISTED, "outputs": {"lab-2": LAB2}})
    monkeypatch.setenv(backend_claims.BACKEND_ENV, f"file://{tmp_path}/state")
    assert main(["plan", "--stack", "sim-2", "--stacks-dir", str(STACKS)]) == 2
    printed = capsys.readouterr()
    assert printed.out == ""
    assert printed.err.splitlines() == [
        "sparkrack: stack sim-2: nodes[1] (spark-2).address: 198.18.0.12 is claimed by stack"
        " lab-2 (its box-a): an `up` would reconfigure that rack; add lab-2 to `takeover` to"
        " take the node over"
    ]
    assert {call["cwd"] for call in calls(log)} == {str(STACKS.parent)}


def test_plan_takes_the_nodes_of_a_stack_its_takeover_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    stacks = stacks_dir_with(tmp_path, "sim-2", cluster("sim-2") | {"takeover": ["lab-2"]})
    fake_backend(tmp_path, monkeypatch, {"ls": LISTED, "outputs": {"lab-2": LAB2}})
    monkeypatch.setenv(backend_claims.BACKEND_ENV, f"file://{tmp_path}/state")
    assert main(["plan", "--stack", "sim-2", "--stacks-dir", str(stacks)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1] == "takes over the nodes these stacks claim: lab-2"


def test_plan_says_what_it_could_not_read_and_plans(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_backend(tmp_path, monkeypatch, {"ls": LISTED, "outputs": {}})
    monkeypatch.setenv(backend_claims.BACKEND_ENV, f"file://{tmp_path}/state")
    assert main(["plan", "--stack", "sim-2", "--stacks-dir", str(STACKS)]) == 0
    assert capsys.readouterr().err.startswith(
        "sparkrack plan: stack sim-2: claims: stack lab-2: `pulumi stack output"
    )


def test_plan_reads_no_backend_the_environment_does_not_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = fake_backend(tmp_path, monkeypatch, {"ls": LISTED, "outputs": {"lab-2": LAB2}})
    assert main(["plan", "--stack", "sim-2", "--stacks-dir", str(STACKS)]) == 0
    assert calls(log) == []

"""Where `sparkrack verify` and `inventory` get the Plan they check: the JSON the program hands
them (`--plan -`, as the end of `up` does, or a file) or the Plan a stack's last `up` exported
(`--stack`, read with the Pulumi CLI). Never a stack file planned again: the JSON must carry the
Plan exactly, for every shipped stack."""

from __future__ import annotations

import io
import json
import os
import stat
import subprocess
from pathlib import Path

import pytest

from sparkrack.cli import main
from sparkrack.config.load import load_stack_file
from sparkrack.ops.deployed import PLAN_OUTPUT
from sparkrack.plan import Plan, make_plan
from tests.unit.support import STACKS

pytestmark = pytest.mark.unit

SHIPPED_FILES = sorted(STACKS.glob("Pulumi.*.yaml"))


def stack_name(path: Path) -> str:
    return path.name.removeprefix("Pulumi.").removesuffix(".yaml")


def test_every_stack_file_is_found() -> None:
    assert {stack_name(path) for path in SHIPPED_FILES} >= {"sim-2", "sim-16", "gb10-2"}


@pytest.mark.parametrize("stack", [stack_name(path) for path in SHIPPED_FILES])
def test_a_shipped_stacks_plan_round_trips_through_its_json_exactly(stack: str) -> None:
    plan = make_plan(load_stack_file(stack, STACKS))
    text = plan.model_dump_json()
    again = Plan.model_validate_json(text)
    assert again == plan
    assert again.model_dump_json() == text
    assert again.digest() == plan.digest()


def sim2_json() -> str:
    return make_plan(load_stack_file("sim-2", STACKS)).model_dump_json()


def inventory_printed(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, object]:
    assert main(["inventory", *argv]) == 0
    printed: dict[str, object] = json.loads(capsys.readouterr().out)
    return printed


def test_the_plan_on_stdin_is_the_plan_checked(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(sim2_json()))
    inventory = inventory_printed(capsys, "--plan", "-")
    assert Plan.model_validate(inventory["plan"]).model_dump_json() == sim2_json()
    assert inventory["roles"] == list(make_plan(load_stack_file("sim-2", STACKS)).deploys)


def test_the_roles_checked_are_the_plans_unless_told_fewer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = make_plan(load_stack_file("sim-2", STACKS)).deploying({"base", "fabric"})
    (tmp_path / "plan.json").write_text(plan.model_dump_json())
    assert inventory_printed(capsys, "--plan", str(tmp_path / "plan.json"))["roles"] == [
        "base",
        "fabric",
    ]
    told = inventory_printed(capsys, "--plan", str(tmp_path / "plan.json"), "--roles", "fabric")
    assert told["roles"] == ["fabric"]
    told = inventory_printed(
        capsys, "--plan", str(tmp_path / "plan.json"), "--roles", "fabric,monitoring"
    )
    assert told["roles"] == ["fabric"]  # monitoring is not deployed: nothing of it to check


def fake_pulumi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, outputs: str) -> Path:
    """A `pulumi` on PATH that answers `stack output --json` with `outputs` and records its
    arguments and directory."""
    answer = tmp_path / "outputs.json"
    answer.write_text(outputs)
    script = tmp_path / "bin" / "pulumi"
    script.parent.mkdir()
    script.write_text(
        f'#!/bin/sh\necho "$PWD $*" > {tmp_path}/called\ncat {answer}\n',
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{script.parent}{os.pathsep}{os.environ['PATH']}")
    return tmp_path / "called"


def test_a_deployed_stacks_plan_is_read_from_its_outputs_in_its_project(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    called = fake_pulumi(tmp_path, monkeypatch, json.dumps({PLAN_OUTPUT: sim2_json()}))
    stacks = tmp_path / "project" / "stacks"
    stacks.mkdir(parents=True)
    inventory = inventory_printed(capsys, "--stack", "sim-2", "--stacks-dir", str(stacks))
    assert Plan.model_validate(inventory["plan"]).model_dump_json() == sim2_json()
    where, args = called.read_text().split(" ", 1)
    assert where == str(stacks.parent)
    assert args.split()[:3] == ["stack", "output", "--json"]
    assert "--stack sim-2" in args


@pytest.mark.parametrize("command", ["verify", "inventory"])
def test_a_stack_never_deployed_is_one_line_and_nothing_is_checked(
    command: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    fake_pulumi(tmp_path, monkeypatch, "{}")
    stacks = tmp_path / "stacks"
    stacks.mkdir()
    assert main([command, "--stack", "fresh", "--stacks-dir", str(stacks)]) == 2
    printed = capsys.readouterr()
    assert printed.out == ""
    assert printed.err.splitlines() == [
        f"sparkrack {command}: stack fresh: no Plan in its outputs: not deployed by `up` yet"
    ]


def test_a_plan_output_this_sparkrack_cannot_read_says_to_deploy_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    old = json.loads(sim2_json())
    del old["deploys"]  # as a Plan from before a field was added
    fake_pulumi(tmp_path, monkeypatch, json.dumps({PLAN_OUTPUT: json.dumps(old)}))
    assert main(["verify", "--stack", "sim-2", "--stacks-dir", str(tmp_path)]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("sparkrack verify: stack sim-2: its `plan` output is not a Plan")
    assert line.endswith("run `pulumi up` with it")


def refuse_to_run(*args: object, **kwargs: object) -> None:
    raise AssertionError(f"ran {args}")


@pytest.mark.parametrize(
    ("text", "why"),
    [("{}", "is not a Plan: stack: Field required"), ("[1", "is not a Plan: Invalid JSON")],
)
def test_a_plan_handed_in_that_is_not_one_is_one_line(
    text: str,
    why: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(text))
    monkeypatch.setattr(subprocess, "Popen", refuse_to_run)  # no check runs on a broken Plan
    assert main(["verify", "--plan", "-"]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"sparkrack verify: --plan stdin {why}")


def test_a_plan_file_that_is_missing_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["verify", "--plan", str(tmp_path / "gone.json")]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line == f"sparkrack verify: --plan {tmp_path / 'gone.json'}: No such file or directory"


def test_a_stack_and_a_plan_together_are_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["verify", "--stack", "sim-2", "--plan", "-"]) == 2
    assert "not allowed with argument" in capsys.readouterr().err

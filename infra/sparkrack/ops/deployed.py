"""What the last `up` of a stack left in its state, read with the Pulumi CLI: the engine's
footprint (plan/rollout.py) and the last rollout's measured downtime, for `plan --against`; the
CLI call itself, for the other stacks' claims too (ops/claims.py); the Plan deployed (PLAN_OUTPUT,
exported by sparkrack.deploy), for `sparkrack verify --stack`."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from sparkrack.plan.model import Plan
from sparkrack.plan.rollout import Footprint

OUTPUT_TIMEOUT_S = 120


# The stack output that holds the Plan deployed, as JSON (sparkrack.deploy exports it).
PLAN_OUTPUT = "plan"


class NotDeployed(Exception):
    """The state does not tell what was asked (no deployed engine or Plan, no answer from the
    CLI); the message says why."""


@dataclass(frozen=True)
class DeployedEngine:
    engine: Footprint
    last_downtime_s: float | None


def pulumi_cli(args: list[str], project_dir: Path) -> str:
    """stdout of `pulumi ARGS --non-interactive`, run in the project (its Pulumi.yaml), in the
    backend the environment names (the engine's own, inside the program)."""
    pulumi = shutil.which("pulumi")
    if pulumi is None:
        raise NotDeployed("the pulumi CLI is not on PATH (scripts/dev puts the one it built there)")
    # A read of the state, not a moment to look for a newer CLI on the network.
    env = {**os.environ, "PULUMI_SKIP_UPDATE_CHECK": "true"}
    argv = [pulumi, *args, "--non-interactive"]
    said = f"`pulumi {' '.join(args)}`"
    try:
        done = subprocess.run(
            argv, cwd=project_dir, env=env, capture_output=True, text=True, timeout=OUTPUT_TIMEOUT_S
        )
    except subprocess.TimeoutExpired:
        raise NotDeployed(f"{said} did not answer in {OUTPUT_TIMEOUT_S} s") from None
    if done.returncode != 0:
        detail = " ".join((done.stderr or done.stdout).split())[-300:]  # one line
        raise NotDeployed(f"{said} failed: {detail}")
    return done.stdout


def stack_outputs(stack: str, project_dir: Path) -> dict[str, object]:
    """`pulumi stack output --json` of the stack (a secret output reads `[secret]`)."""
    try:
        printed = pulumi_cli(["stack", "output", "--json", "--stack", stack], project_dir)
    except NotDeployed as error:
        raise NotDeployed(f"stack {stack}: {error}") from None
    outputs = json.loads(printed or "{}")
    return outputs if isinstance(outputs, dict) else {}


def deployed_engine(stack: str, project_dir: Path) -> DeployedEngine:
    outputs = stack_outputs(stack, project_dir)
    if "engine" not in outputs:
        raise NotDeployed(f"stack {stack}: no engine in its outputs (never deployed by `up`?)")
    try:
        engine = Footprint.model_validate(outputs["engine"])
    except ValidationError as error:
        raise NotDeployed(
            f"stack {stack}: its `engine` output is not a footprint: {error}"
        ) from None
    downtime = outputs.get("last_rollout_downtime_s")
    return DeployedEngine(engine, float(downtime) if isinstance(downtime, int | float) else None)


def deployed_plan(stack: str, project_dir: Path) -> Plan:
    """The Plan the stack's last `up` deployed, exactly as the program built it."""
    outputs = stack_outputs(stack, project_dir)
    text = outputs.get(PLAN_OUTPUT)
    if not isinstance(text, str):
        raise NotDeployed(f"stack {stack}: no Plan in its outputs: not deployed by `up` yet")
    try:
        return Plan.model_validate_json(text)
    except ValidationError as error:
        raise NotDeployed(
            f"stack {stack}: its `{PLAN_OUTPUT}` output is not a Plan this sparkrack reads "
            f"({error.error_count()} problems): run `pulumi up` with it"
        ) from None

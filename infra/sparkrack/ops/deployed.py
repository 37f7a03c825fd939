"""What the last `up` of a stack left in its state, read with the Pulumi CLI: the engine's
footprint (plan/rollout.py) and the last rollout's measured downtime, for `plan --against`; the
Plan deployed (sparkrack.deploy's PLAN_OUTPUT), for `sparkrack verify --stack`."""

from __future__ import annotations

import json
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
    """The stack has no deployed engine (or Plan) to read; the message says why."""


@dataclass(frozen=True)
class DeployedEngine:
    engine: Footprint
    last_downtime_s: float | None


def stack_outputs(stack: str, project_dir: Path) -> dict[str, object]:
    """`pulumi stack output --json` of the stack, run in the project (its Pulumi.yaml)."""
    pulumi = shutil.which("pulumi")
    if pulumi is None:
        raise NotDeployed("the pulumi CLI is not on PATH (scripts/dev puts the one it built there)")
    argv = [pulumi, "stack", "output", "--json", "--stack", stack, "--non-interactive"]
    done = subprocess.run(
        argv, cwd=project_dir, capture_output=True, text=True, timeout=OUTPUT_TIMEOUT_S
    )
    if done.returncode != 0:
        detail = (done.stderr.strip() or done.stdout.strip())[-300:]
        raise NotDeployed(f"stack {stack}: `pulumi stack output` failed: {detail}")
    outputs = json.loads(done.stdout or "{}")
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

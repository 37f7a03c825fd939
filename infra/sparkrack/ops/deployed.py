"""What the last `up` of a stack left in its state, read with the Pulumi CLI: the engine's
footprint (plan/rollout.py) and the last rollout's measured downtime, for `plan --against`; the
CLI call itself, for the other stacks' claims too (ops/claims.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from sparkrack.plan.rollout import Footprint

OUTPUT_TIMEOUT_S = 120


class NotDeployed(Exception):
    """The state does not tell what was asked (no deployed engine, no answer from the CLI);
    the message says why."""


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

"""What the package's modules share: the rack's stack, its wall times, and the looks at it."""

from __future__ import annotations

import json
import subprocess
from typing import Any

from tests.e2e.conftest import SPARKRACK, PulumiProject
from tests.e2e.sim_fixtures import planned_changes, sparkrack_verify

STACK = "e2e-full2"
PREFIX = "198.18.3"
TIMES: dict[str, object] = {}
STREAMING = {"PULUMI_ENABLE_STREAMING_JSON_PREVIEW": "true"}


def changes(project: PulumiProject) -> dict[str, tuple[str, list[str]]]:
    """What a refreshing preview would change: resource name -> (operation, properties)."""
    args = ("preview", "--stack", STACK, "--refresh", "--json")
    return planned_changes(project.run(*args, extra_env=STREAMING).stdout)


def verify_table(project: PulumiProject) -> subprocess.CompletedProcess[str]:
    """`sparkrack verify`'s table for the rack's stack."""
    return sparkrack_verify(project.env, STACK, project.root / "stacks")


def verify_report(project: PulumiProject) -> dict[str, Any]:
    """`sparkrack verify --json`'s report, with its exit status."""
    stacks = str(project.root / "stacks")
    done = subprocess.run(
        [SPARKRACK, "verify", "--stack", STACK, "--stacks-dir", stacks, "--json"],
        env=project.env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    report: dict[str, Any] = json.loads(done.stdout)
    report["exit_status"] = done.returncode
    return report

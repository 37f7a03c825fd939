"""What the package's modules share: the rack's stack, its wall times, and the looks at it."""

from __future__ import annotations

import subprocess
from typing import Any

from tests.e2e.conftest import PulumiProject
from tests.e2e.sim_fixtures import planned_changes, sparkrack_verify
from tests.e2e.sim_fixtures import verify_report as sparkrack_verify_report

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
    """`sparkrack verify --json`'s report for the rack's stack, with its exit status."""
    return sparkrack_verify_report(project.env, STACK, project.root / "stacks")

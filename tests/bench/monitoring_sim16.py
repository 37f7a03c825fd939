"""Benchmark, not a test: the monitoring role on a private sim-16 (issue 8's 49 targets).

sim-16's rack, renamed and moved to 198.18.22.0/24, is brought up (the engine stand-in and the
monitoring images built here first: the sim stacks load them from this machine). The full
program (infra/__main__.py: every role, monitoring beside inference) then runs through the real
engine, each step timed:

1. `pulumi up --continue-on-error` from fresh nodes (verifyOnUp off: verify is step 3);
2. how many of Prometheus's 49 targets are up, polled until all are or 300 s pass (by job);
3. `sparkrack verify` (exit status; the monitoring checks' outcomes);
4. `sparkrack monitoring lint` without traffic (its verdicts);
5. `pulumi preview --refresh --expect-no-changes`.

The stack is destroyed and the rack removed at the end unless --keep. Run in the `scripts/dev`
environment:
    python -m tests.bench.monitoring_sim16 [--keep]
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from sparkrack.config.load import load_stack_file
from sparkrack.ops.monitoring_lint import lint_stack
from sparkrack.plan import Plan, make_plan
from sparkrack.sim.monitoring_images import ensure_monitoring_images
from sparkrack.sim.standin.image import ensure_standin_image
from tests.bench.sim16 import bench_on_sim16
from tests.e2e.conftest import SPARKRACK, PulumiProject, make_project
from tests.e2e.sim_fixtures import private_cluster, targets_up_by_job

STACK, PREFIX = "bench-mon16", "198.18.22"
STEP_TIMEOUT_S = 7200.0
TARGETS_TIMEOUT_S = 300.0
TARGETS = 49


def wait_for_targets(plan: Plan) -> tuple[float, Counter[str]]:
    start = time.monotonic()
    up = targets_up_by_job(STACK, plan)
    while sum(up.values()) < TARGETS and time.monotonic() - start < TARGETS_TIMEOUT_S:
        time.sleep(2)
        up = targets_up_by_job(STACK, plan)
    return round(time.monotonic() - start, 1), up


def timed(project: PulumiProject, *args: str) -> str:
    """Wall time and exit status; on failure the engine's last words are printed."""
    start = time.monotonic()
    done = project.run(*args, "--stack", STACK, check=False, timeout=STEP_TIMEOUT_S)
    if done.returncode != 0:
        print(done.stdout[-3000:], done.stderr[-2000:], flush=True)
    return f"{round(time.monotonic() - start, 1)} (exit {done.returncode})"


def verify(project: PulumiProject) -> tuple[float, dict[str, Any]]:
    command = [SPARKRACK, "verify", "--stack", STACK, "--json"]
    command += ["--stacks-dir", str(project.root / "stacks")]
    start = time.monotonic()
    done = subprocess.run(command, env=project.env, capture_output=True, text=True, check=False)
    seconds = round(time.monotonic() - start, 1)
    report: dict[str, Any] = json.loads(done.stdout) if done.stdout.strip() else {"results": []}
    monitoring = Counter(r["outcome"] for r in report["results"] if r["category"] == "monitoring")
    failed = [f"{r['node']} {r['id']}" for r in report["results"] if r["outcome"] == "failed"]
    return seconds, {"exit": done.returncode, "monitoring": dict(monitoring), "failed": failed}


def measure(base: Path) -> dict[str, Any]:
    project = make_project(base)
    project.write_stack(STACK, private_cluster("sim-16", STACK, PREFIX))
    project.run("stack", "init", STACK)
    project.run("config", "set", "--stack", STACK, "sparkrack:verifyOnUp", "false")
    plan = make_plan(load_stack_file(STACK, project.root / "stacks"))
    rows: dict[str, Any] = {}
    try:
        # --continue-on-error: a resource that fails (on this loaded machine, Ray did before its
        # workers joined in waves) leaves the others to finish, so the exporters' and
        # Prometheus's figures are still read.
        fresh_up = ("up", "--yes", "--skip-preview", "--continue-on-error")
        rows["1 up (fresh)"] = timed(project, *fresh_up)
        print(rows, flush=True)
        seconds, up = wait_for_targets(plan)
        rows[f"2 targets up: {sum(up.values())}/{TARGETS} {dict(up)}"] = seconds
        print(rows, flush=True)
        seconds, outcome = verify(project)
        rows[f"3 sparkrack verify {outcome}"] = seconds
        start = time.monotonic()
        verdicts = Counter(row.verdict for row in lint_stack(STACK, project.root / "stacks"))
        rows[f"4 monitoring lint {dict(verdicts)}"] = round(time.monotonic() - start, 1)
        rows["5 preview --refresh"] = timed(project, "preview", "--refresh", "--expect-no-changes")
    finally:
        project.run("destroy", "--stack", STACK, "--yes", check=False, timeout=STEP_TIMEOUT_S)
    return rows


def main(argv: list[str]) -> int:
    ensure_standin_image(print)
    ensure_monitoring_images(print)
    return bench_on_sim16(STACK, PREFIX, measure, argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

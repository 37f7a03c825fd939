"""Benchmark, not a test: wall times of issue 5's acceptance steps 1-3 on a private sim-16.

sim-16's rack, renamed and moved to 198.18.23.0/24, is brought up; the roles' program (programs/
roles: base, fabric, cpu_pinning, podman as infra/__main__.py wires them) then runs through the
real engine, with the project's `refresh: always`: `pulumi up` from fresh nodes (1), a second `up`
(2), and `preview --refresh --expect-no-changes` (3); then `sparkrack verify` of those roles on the
sixteen nodes (4, issue 6's sim-16 wall time). The stack is destroyed and the rack removed at the
end unless --keep. Run: `eval "$(scripts/dev env)"`, then
    python -m tests.bench.roles_sim16 [--keep]
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from tests.bench.sim16 import bench_on_sim16
from tests.e2e.conftest import SPARKRACK, PulumiProject, make_project
from tests.e2e.programs import PROGRAMS
from tests.e2e.sim_fixtures import private_cluster

STACK = "bench-roles-16"
PREFIX = "198.18.23"
STEP_TIMEOUT_S = 3600.0
# The roles the program deploys: verify holds the nodes to these only.
DEPLOYED_ROLES = "base,fabric,cpu_pinning,podman"
STEPS = {
    "1 up (fresh)": ("up", "--yes"),
    "2 second up": ("up", "--yes"),
    "3 preview --refresh": ("preview", "--refresh", "--expect-no-changes"),
}


def timed(project: PulumiProject, *args: str) -> float:
    start = time.monotonic()
    project.run(*args, "--stack", STACK, timeout=STEP_TIMEOUT_S)
    return round(time.monotonic() - start, 1)


def timed_verify(project: PulumiProject) -> float:
    command = [SPARKRACK, "verify", "--stack", STACK, "--roles", DEPLOYED_ROLES]
    command += ["--stacks-dir", str(project.root / "stacks")]
    start = time.monotonic()
    done = subprocess.run(command, env=project.env, capture_output=True, text=True, check=False)
    seconds = round(time.monotonic() - start, 1)
    print(done.stdout[-1500:], f"verify exit {done.returncode}: {seconds} s", flush=True)
    return seconds


def measure(base: Path) -> dict[str, float]:
    project = make_project(base, PROGRAMS / "roles")
    project.write_stack(STACK, private_cluster("sim-16", STACK, PREFIX))
    project.run("stack", "init", STACK)
    times = {}
    try:
        for name, args in STEPS.items():
            times[name] = timed(project, *args)
            print(f"{name}: {times[name]} s", flush=True)
        times["4 sparkrack verify"] = timed_verify(project)
    finally:
        project.run("destroy", "--stack", STACK, "--yes", check=False, timeout=STEP_TIMEOUT_S)
    return times


def main(argv: list[str]) -> int:
    return bench_on_sim16(STACK, PREFIX, measure, argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

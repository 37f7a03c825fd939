"""Benchmark, not a test: how close a drift check and a no-change `up` come to the floor.

Issue 18's measure, on a stack the repository's own project has deployed (default sim-16:
`scripts/dev up sim-16` first, which also gives the fresh `up`'s time):

- the floor: every question a no-op refresh asks a node (each distinct command its facts run, as
  asking.learned records them during a first preview), asked with one SSH connection and one remote
  shell per node, the root ones under one sudo (asking.batch's script), all nodes at once: the same
  reads with the fewest round trips and full parallelism;
- `pulumi preview --refresh --expect-no-changes`, the drift check;
- `pulumi up --yes` with nothing to change: Pulumi's preview, then the update, each refreshing
  (the update's reads trust the preview's: asking.read_once);
- `pulumi up --yes --skip-preview` with nothing to change: one refresh, the update's, as
  `scripts/dev up` and an unattended converge (CI, a timer) run it;
- with --ansible N, N runs of `ansible-playbook --check -f <nodes>` of the equivalent playbook
  written from the deployed state (tests/bench/ansible_check.py), and the preview's share of its
  time.

Each is run --runs times back to back; the table gives min and median and the ratios to the floor,
with the machine's load average before and after. The engine is plain `pulumi`, as a user runs it,
in the environment `eval "$(scripts/dev env STACK)"` gives (offline settings, the sim
passphrase): scripts/dev's set-up runs once, before, and is shown apart; the engine's own start-up
is measured and shown, not subtracted.
Run: `scripts/dev setup`, then `.venv/bin/python -m tests.bench.speed [--stack sim-16] [--runs 3]`.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from sparkrack.asking import batch, learned
from sparkrack.asking.batch import batchable
from sparkrack.config.load import load_stack_file
from sparkrack.plan import NodePlan, make_plan
from sparkrack.resources.control_load import ssh_args
from sparkrack.transport.ssh import TRACE_ENV
from sparkrack.transport.target import Target
from tests.bench import ansible_check

REPO = Path(__file__).resolve().parents[2]
DEV = str(REPO / "scripts" / "dev")
STEP_TIMEOUT_S = 3600


def engine_env(stack: str) -> dict[str, str]:
    """The environment `eval "$(scripts/dev env STACK)"` gives a shell: plain `pulumi` on PATH
    with sparkrack's settings, as a user runs it (scripts/dev's set-up is timed once, apart)."""
    shell = f'eval "$({shlex.quote(DEV)} env {shlex.quote(stack)})" && env -0'
    done = subprocess.run(["bash", "-c", shell], capture_output=True, check=False)
    if done.returncode != 0:
        sys.exit(f"scripts/dev env {stack} failed:\n{done.stderr.decode()[-3000:]}")
    pairs = (item.split("=", 1) for item in done.stdout.decode().split("\0") if "=" in item)
    return dict(pairs)


def engine(stack: str, *args: str, env: dict[str, str]) -> float:
    """One `pulumi` command, timed; a failure stops the benchmark."""
    started = time.monotonic()
    done = subprocess.run(
        ["pulumi", *args, "--stack", stack],
        env=env,
        capture_output=True,
        text=True,
        timeout=STEP_TIMEOUT_S,
        check=False,
    )
    seconds = time.monotonic() - started
    if done.returncode != 0:
        sys.exit(f"pulumi {' '.join(args)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return seconds


def traced_commands(trace: Path) -> dict[str, list[str]]:
    """node -> the SSH commands one refresh ran there (a batch of questions is one), in order."""
    commands: dict[str, list[str]] = defaultdict(list)
    for line in trace.read_text().splitlines():
        record = json.loads(line)
        commands[record["node"]].append(record["command"])
    return commands


def ssh_command(node: NodePlan) -> list[str]:
    """OpenSSH as the program reaches the node, running one shell that reads its script."""
    return [*ssh_args(Target.for_node(node)), "sh -s"]


def floor(nodes: list[NodePlan]) -> float:
    """Every node's questions in one connection and one shell, all nodes at once."""

    def one(node: NodePlan) -> None:
        nonce = secrets.token_hex(8)
        questions = batchable(learned.load(Target.for_node(node)))
        script = batch.script(questions, nonce)
        done = subprocess.run(ssh_command(node), input=script, capture_output=True, text=True)
        answered = batch.answers(done.stdout, questions, nonce)
        if done.returncode != 0 or not answered:
            sys.exit(f"floor on {node.name}: {done.stderr[-500:]}")

    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=len(nodes)) as pool:
        list(pool.map(one, nodes))
    return time.monotonic() - started


def ansible_runs(stack: str, count: int) -> list[float]:
    """Ansible's check of the same nodes, `count` times, from the deployed state."""
    exported = subprocess.run(
        [DEV, "pulumi", "stack", "export", "--stack", stack],
        capture_output=True, text=True, check=True, timeout=STEP_TIMEOUT_S,
    )  # fmt: skip
    export = json.loads(exported.stdout)
    with tempfile.TemporaryDirectory(prefix="sparkrack-ansible-") as scratch:
        return runs(count, lambda: ansible_check.check(Path(scratch), export))


def runs(count: int, measure: Callable[[], float]) -> list[float]:
    return [measure() for _ in range(count)]


def summary(name: str, seconds: list[float], base: float | None) -> str:
    low, mid = min(seconds), statistics.median(seconds)
    ratio = f"{mid / base:.1f}x" if base else "1.0x"
    return f"{name} | {low:.1f} | {mid:.1f} | {ratio} | {', '.join(f'{s:.1f}' for s in seconds)}"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stack", default="sim-16")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--ansible", type=int, default=0, help="runs of Ansible's check (0: none)")
    args = parser.parse_args(argv)
    plan = make_plan(load_stack_file(args.stack))
    load_before = os.getloadavg()
    started = time.monotonic()
    env = engine_env(args.stack)
    setup = time.monotonic() - started
    startup = engine(args.stack, "stack", "select", env=env)
    with tempfile.TemporaryDirectory(prefix="sparkrack-speed-") as scratch:
        trace = Path(scratch) / "trace.jsonl"
        preview = ("preview", "--refresh", "--expect-no-changes")
        first = engine(args.stack, *preview, env={**env, TRACE_ENV: str(trace)})
        commands = traced_commands(trace)
    floors = runs(args.runs, lambda: floor(list(plan.nodes)))
    previews = runs(args.runs, lambda: engine(args.stack, *preview, env=env))
    ups = runs(args.runs, lambda: engine(args.stack, "up", "--yes", env=env))
    unattended = runs(
        args.runs, lambda: engine(args.stack, "up", "--yes", "--skip-preview", env=env)
    )
    ansible = ansible_runs(args.stack, args.ansible) if args.ansible else []
    base = statistics.median(floors)
    counts = Counter({node: len(lines) for node, lines in commands.items()})
    questions = [len(learned.load(Target.for_node(node))) for node in plan.nodes]
    print(
        f"stack {args.stack}: {len(plan.nodes)} nodes, {sum(questions)} questions "
        f"({min(questions)}-{max(questions)} a node); the traced refresh ran "
        f"{sum(counts.values())} SSH commands ({min(counts.values())}-{max(counts.values())} "
        f"a node) in {first:.1f} s"
    )
    print("step | min (s) | median (s) | median / floor | runs (s)")
    print(summary("floor: one shell per node, all at once", floors, None))
    print(summary("pulumi preview --refresh (no changes)", previews, base))
    print(summary("pulumi up (no changes): preview, then update", ups, base))
    print(summary("pulumi up --skip-preview (no changes): one refresh", unattended, base))
    if ansible:
        print(summary("ansible-playbook --check (same nodes, same checks)", ansible, base))
        share = statistics.median(previews) / statistics.median(ansible)
        print(f"preview / ansible check: {share:.2f}x (medians)")
    print(f"engine start-up (`pulumi stack select`): {startup:.1f} s, included above")
    print(f"scripts/dev's set-up (`scripts/dev env`, once, before): {setup:.1f} s, not included")
    print(f"load average before {load_before[0]:.2f}, after {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

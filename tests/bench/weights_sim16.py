"""Benchmark, not a test: layer-aware tree shipping against the naive baseline, measured on a
private sim-16 (PP=16, TP=1: sixteen stages of Kimi K3's 93 layers).

sim-16's rack, renamed and moved to 198.18.19.0/24, is brought up, and the weights program
(programs/weights) deploys base and fabric (not timed). A synthetic checkpoint of `--gib` (at
least 1 GiB: 32 shards of random bytes, an index laying the 93 layers over them) is written on
the head. Then, timed, each from the same starting point:

- sparkrack: `pulumi up` with `serving.weights` naming the checkpoint: each node gets only its
  stage's files, over the fabric, from the head or its parent in the shipping tree;
- naive: the head sends every file to every other node, one after another (`cat | ssh node`,
  over the fabric, with the same key and pinned host keys).

Bytes are read from every node's fabric netdev counters (tx_bytes), before and after; the
schedule's own count is printed beside them. Wall time is the step's. Stack destroyed (the
weights are retained) and rack removed at the end unless --keep. Run in the `scripts/dev`
environment:
    python -m tests.bench.weights_sim16 [--gib 1] [--keep]
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from sparkrack.config.load import spec_from_config
from sparkrack.plan import NodePlan, Plan, make_plan
from sparkrack.plan.weights import node_files, ship_tree
from sparkrack.sim import cluster
from sparkrack.sim.keys import ssh_command
from sparkrack.text.checkpoint_index import shard_contents
from sparkrack.transport.target import Target
from tests.e2e.conftest import REPO, PulumiProject, make_project
from tests.e2e.programs import PROGRAMS
from tests.e2e.programs.weights.checkpoint import make_command
from tests.e2e.sim_fixtures import private_cluster, shipped_rack
from tests.weights_schedule import tree_schedule

STACK, PREFIX = "bench-w16", "198.18.19"
CHECKPOINT = "/home/sparkrack/ckpt"
NAIVE_DIR = "/home/sparkrack/naive"
SHARDS, LAYERS = 32, 93
STEP_TIMEOUT_S = 7200.0


def ssh(node: str, command: str) -> str:
    done = subprocess.run(
        ssh_command(STACK, node, command), capture_output=True, text=True, timeout=STEP_TIMEOUT_S
    )
    if done.returncode != 0:
        raise SystemExit(f"{node}: `{command[:200]}` exited {done.returncode}: {done.stderr}")
    return done.stdout.strip()


def config(weights: bool) -> Any:
    raw = private_cluster("sim-16", STACK, PREFIX)
    if weights:
        raw["serving"]["weights"] = {"source": "directory", "directory": CHECKPOINT}
    return raw


def fabric_tx(plan: Plan) -> dict[str, int]:
    """Bytes each node has sent over its fabric netdevs so far."""
    sent = {}
    for node in plan.nodes:
        paths = " ".join(
            f"/sys/class/net/{link.netdev}/statistics/tx_bytes"
            for link in node.links
            if link.address
        )
        sent[node.name] = sum(int(v) for v in ssh(node.name, f"cat {paths}").split())
    return sent


def measured(plan: Plan, step: Any) -> tuple[float, int, int]:
    """(seconds, bytes out of node 1, bytes out of all nodes) over the fabric during `step`."""
    before, started = fabric_tx(plan), time.monotonic()
    step()
    seconds, after = time.monotonic() - started, fabric_tx(plan)
    moved = {node: after[node] - before[node] for node in after}
    return round(seconds, 1), moved[plan.head_node], sum(moved.values())


def naive_script(plan: Plan, files: list[str]) -> str:
    """On the head as the service user: every file to every other node, in series."""
    from roles.common import fabric_reach
    from sparkrack.resources.links import leased_address

    def address(node: NodePlan) -> str:  # on a DHCP rail, the lease the node holds
        reach = fabric_reach(head, node)
        return reach.address or leased_address(Target.for_node(node), str(reach.lease_netdev))

    head = plan.node(plan.head_node)
    peers = [address(node) for node in plan.nodes if node.name != head.name]
    key = '-i "$HOME"/.ssh/sparkrack_cluster_ed25519 -o BatchMode=yes'
    receive = f'cat > {NAIVE_DIR}/."$f".tmp && mv {NAIVE_DIR}/."$f".tmp {NAIVE_DIR}/"$f"'
    return (
        f"set -e; for a in {' '.join(peers)}; do ssh {key} sparkrack@$a mkdir -p {NAIVE_DIR}; "
        f"for f in {' '.join(files)}; do cat {CHECKPOINT}/$f | "
        f'ssh {key} sparkrack@$a "f=$f;" {shlex.quote(receive)}; done; done'
    )


def run(project: PulumiProject, *args: str) -> None:
    project.run(*args, "--stack", STACK, timeout=STEP_TIMEOUT_S)


def bench(base: Path, gib: float) -> list[dict[str, Any]]:
    project = make_project(base, PROGRAMS / "weights")
    project.write_stack(STACK, config(weights=False))
    project.run("stack", "init", STACK)
    project.run("config", "set", "--stack", STACK, "sparkrack:verifyOnUp", "false")
    started = time.monotonic()
    run(project, "up", "--yes", "--skip-preview")
    print(f"roles up (not timed below): {time.monotonic() - started:.0f} s", flush=True)
    plan = make_plan(spec_from_config(STACK, config(True), base_dir=REPO / "stacks"))
    head, shard_bytes = plan.head_node, int(gib * 2**30) // SHARDS
    weight_map = json.loads(ssh(head, make_command(CHECKPOINT, LAYERS, SHARDS, shard_bytes)))
    files = sorted(ssh(head, f"ls {CHECKPOINT}").split())
    sizes = {n: int(ssh(head, f"stat -c %s {CHECKPOINT}/{n}")) for n in files}
    total = sum(sizes.values())
    needs = node_files(shard_contents(weight_map), files, plan.layout)
    schedule = tree_schedule(needs, ship_tree(plan.layout, head), head)
    counted = sum(sizes[t.shard] for t in schedule)
    counted_head = sum(sizes[t.shard] for t in schedule if t.source == head)
    rows = []
    project.write_stack(STACK, config(weights=True))
    seconds, from_head, moved = measured(
        plan, lambda: run(project, "up", "--yes", "--skip-preview")
    )
    rows.append(
        row("sparkrack: layer-aware, tree", seconds, from_head, moved, counted_head, counted)
    )
    script = naive_script(plan, files)
    naive_count = total * (len(plan.nodes) - 1)
    step = lambda: ssh(head, f"sudo -n -u sparkrack -H sh -c {shlex.quote(script)}")  # noqa: E731
    seconds, from_head, moved = measured(plan, step)
    rows.append(
        row("naive: all to all from node 1", seconds, from_head, moved, naive_count, naive_count)
    )
    print(f"checkpoint: {total} B in {len(files)} files ({SHARDS} shards of {shard_bytes} B)")
    return rows


def row(
    label: str, seconds: float, head: int, moved: int, counted_head: int, counted: int
) -> dict[str, Any]:
    return {
        "plan": label,
        "wall_s": seconds,
        "node1_tx_bytes": head,
        "all_tx_bytes": moved,
        "schedule_node1_bytes": counted_head,
        "schedule_bytes": counted,
    }


def table(rows: list[dict[str, Any]]) -> str:
    keys = list(rows[0])
    widths = [max(len(k), *(len(str(r[k])) for r in rows)) for k in keys]
    lines = ["  ".join(k.ljust(w) for k, w in zip(keys, widths, strict=True))]
    lines += [
        "  ".join(str(r[k]).ljust(w) for k, w in zip(keys, widths, strict=True)) for r in rows
    ]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=1.0)
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args(argv)
    if args.gib < 1:
        parser.error("the comparison is specified for a checkpoint of at least 1 GiB")
    topology = shipped_rack("sim-16", STACK, PREFIX)
    status = cluster.up(topology, print)
    if not status.healthy:
        return 1
    try:
        with tempfile.TemporaryDirectory() as base:
            rows = bench(Path(base), args.gib)
            print(table(rows))
            print(json.dumps(rows))
    finally:
        if not args.keep:
            cluster.down(topology, print)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

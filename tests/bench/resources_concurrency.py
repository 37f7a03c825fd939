"""Benchmark, not a test: how the dynamic-provider host's 4-operation cap shapes a deploy.

Brings up a two-node sim on its own stack and /24, deploys N RemoteFiles per node and times
`pulumi up` (fresh), a second `up` (nothing to do) and `preview --refresh`, at engine parallelism
1, 4 and the default (unbounded). If the host's four worker threads are the ceiling, 4 and the
default take the same time. Run: `eval "$(scripts/dev env)"`, then
    python -m tests.bench.resources_concurrency [N ...]
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from sparkrack.sim import cluster
from sparkrack.sim.keys import known_hosts_path, login_key
from sparkrack.sim.topology import two_node_topology
from tests.e2e.conftest import PulumiProject
from tests.e2e.programs import program_project, resources_config

STACK = "e2e-bench"
PREFIX = "198.18.8"


def timed(project: PulumiProject, *args: str) -> float:
    start = time.monotonic()
    project.run(*args, "--stack", STACK)
    return time.monotonic() - start


def measure(root: Path, files: int, parallel: str) -> dict[str, float]:
    topology = two_node_topology(stack=STACK, mgmt_prefix=PREFIX)
    nodes = [(node.name, node.mgmt_address) for node in topology.nodes]
    config = resources_config(nodes, str(login_key(STACK)), str(known_hosts_path(STACK)))
    config |= {"e2e:files": str(files), "e2e:only": "files"}
    project = program_project(root / f"n{files}-p{parallel}", "resources", STACK, config)
    flags = ["--parallel", parallel] if parallel != "default" else []
    try:
        return {
            "up": timed(project, "up", "--yes", *flags),
            "second up": timed(project, "up", "--yes", *flags),
            "preview --refresh": timed(project, "preview", "--refresh", *flags),
        }
    finally:
        project.run("destroy", "--yes", "--stack", STACK)


def main(counts: list[int]) -> None:
    topology = two_node_topology(stack=STACK, mgmt_prefix=PREFIX)
    assert cluster.up(topology, print).healthy
    try:
        with tempfile.TemporaryDirectory() as tmp:
            print(
                f"{'files/node':>10} {'parallel':>8} {'up':>7} {'2nd up':>7} {'prev --refresh':>15}"
            )
            for files in counts:
                for parallel in ("1", "4", "default"):
                    row = measure(Path(tmp), files, parallel)
                    times = " ".join(f"{row[k]:7.1f}" for k in ("up", "second up"))
                    print(f"{files:>10} {parallel:>8} {times} {row['preview --refresh']:15.1f}")
    finally:
        cluster.down(topology, print)


if __name__ == "__main__":
    main([int(arg) for arg in sys.argv[1:]] or [1, 16, 64])

"""`sparkrack inventory` and `sparkrack verify`: the Plan's checks run on the live nodes.

verify is handed the deployed Plan (it never plans a stack itself), writes the inventory, runs
the checks (sparkrack.verify.checks, shipped in the package) under pytest with one pytest-xdist
worker per node group (a node's checks share one SSH master), collects every outcome and renders
the table. The exit status is CI's: 0 when nothing failed, 1
on a failed check, 2 when the suite itself broke.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkrack.transport import ssh
from sparkrack.transport.target import Target
from sparkrack.verify.collect import RESULTS_ENV
from sparkrack.verify.inventory import Inventory
from sparkrack.verify.table import failures, render, summary

# The checks ship in the package: an installed sparkrack verifies without this repository.
SUITE = Path(__file__).resolve().parent / "checks"
INVENTORY_ENV = "SPARKRACK_INVENTORY"
MAX_WORKERS = 8
SUITE_BROKEN = 2


@dataclass(frozen=True)
class Verification:
    inventory: Inventory
    results: list[dict[str, Any]]
    seconds: float
    exit_status: int  # pytest's
    output: str  # pytest's, shown when the suite itself broke

    @property
    def failed(self) -> list[dict[str, Any]]:
        return [r for r in self.results if r["outcome"] == "failed"]

    @property
    def status(self) -> int:
        if not self.results or self.exit_status not in (0, 1):
            return SUITE_BROKEN
        return 1 if self.failed else 0

    def table(self) -> str:
        nodes = [node.name for node in self.inventory.nodes]
        return render(self.inventory.stack, nodes, self.results, self.seconds)

    def summary(self, shown: int = 20) -> str:
        """The failing checks (at most `shown`) and the table's closing line: what the
        verification that ends `pulumi up` prints, and so what a failed `up` says."""
        stack = self.inventory.stack
        failing = failures(self.results)
        lines = failing[:shown]
        if len(failing) > shown:
            lines.append(f"... and {len(failing) - shown} more (sparkrack verify --stack {stack})")
        return "\n".join([*lines, summary(stack, self.results, self.seconds)])

    def as_json(self) -> dict[str, Any]:
        return {
            "stack": self.inventory.stack,
            "digest": self.inventory.digest,
            "ok": self.status == 0,
            "seconds": round(self.seconds, 2),
            "results": self.results,
        }


def workers(inventory: Inventory) -> list[str]:
    if importlib.util.find_spec("xdist") is None:
        return []  # one process: slower on a big rack, same outcomes
    count = min(len(inventory.nodes), MAX_WORKERS, (os.cpu_count() or 1) * 4)
    return ["-n", str(count), "--dist", "loadgroup"] if count > 1 else []


def unavailable_result(node: str, reason: str) -> dict[str, Any]:
    """The one line a node that cannot be checked gets, in place of all its checks."""
    return {
        "id": f"test_node_answers_with_its_pinned_key[{node}]",
        "node": node,
        "check": "test_node_answers_with_its_pinned_key",
        "category": "ssh",
        "outcome": "failed",
        "detail": reason,
    }


def verify(inventory: Inventory) -> Verification:
    """Every node asked once first: one that does not answer, or offers another host key, is
    reported in one line and its checks are not run (each would fail on the same reason)."""
    started = time.monotonic()
    unavailable = ssh.unavailable(Target.for_node(node) for node in inventory.nodes)
    inventory = inventory.model_copy(
        update={"unavailable": {node: str(error) for node, error in unavailable.items()}}
    )
    with tempfile.TemporaryDirectory(prefix="sparkrack-verify-") as directory:
        inventory_file = Path(directory) / "inventory.json"
        inventory_file.write_text(inventory.model_dump_json(indent=1))
        results_file = Path(directory) / "results.json"
        # Its own empty configuration and root: no project's pytest settings reach the checks.
        config = Path(directory) / "pytest.ini"
        config.write_text("[pytest]\n")
        command = [sys.executable, "-m", "pytest", str(SUITE), "-q", "-p", "no:cacheprovider"]
        command += ["-c", str(config), "--rootdir", str(SUITE), "--strict-markers"]
        command += ["-p", "sparkrack.verify.collect"]
        done = subprocess.run(
            [*command, *workers(inventory)],
            cwd=directory,
            env={**os.environ, INVENTORY_ENV: str(inventory_file), RESULTS_ENV: str(results_file)},
            capture_output=True,
            text=True,
            check=False,
        )
        results = json.loads(results_file.read_text()) if results_file.exists() else []
    results += [unavailable_result(node, why) for node, why in inventory.unavailable.items()]
    return Verification(
        inventory=inventory,
        results=results,
        seconds=time.monotonic() - started,
        exit_status=done.returncode,
        output=done.stdout + done.stderr,
    )

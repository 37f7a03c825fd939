"""Verification at the end of `pulumi up`: `sparkrack verify` run locally, triggered by the Plan.

The one imperative step of the program, written as a sparkrack dynamic resource because
pulumi_command's provider cannot be built here. Its only trigger is the Plan's digest: create and
update run the suite, `diff` asks for an update only when the digest changed, and `read` returns
what was recorded without re-running (an unchanged cluster does not re-verify on every preview).
A failed check fails the resource, and so `pulumi up`, naming each failing node and check.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pulumi
from pulumi.dynamic import CreateResult, DiffResult, ReadResult, Resource, UpdateResult

from sparkrack.resources.base import PULUMI_MODULE

TRIGGERS = ("stack", "digest", "stacks_dir")
TIMEOUT_S = 900
SHOWN_FAILURES = 20


class VerificationError(Exception):
    """The suite ran and found failing checks, or could not run."""


class VerificationProvider(pulumi.dynamic.ResourceProvider):
    serialize_as_secret_always = False

    def create(self, props: dict[str, Any]) -> CreateResult:
        return CreateResult(f"verify:{props['stack']}", {**props, **run_verify(props)})

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        changed = [key for key in TRIGGERS if olds.get(key) != news.get(key)]
        return DiffResult(changes=bool(changed), replaces=[], stables=[])

    def update(self, _id: str, _olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        return UpdateResult({**news, **run_verify(news)})

    def read(self, id_: str, props: dict[str, Any]) -> ReadResult:
        return ReadResult(id_, props)  # what the last run found; nothing is re-run

    def delete(self, _id: str, _props: dict[str, Any]) -> None:
        return None


def verify_command(props: dict[str, Any]) -> list[str]:
    command = [sys.executable, "-m", "sparkrack.cli", "verify", "--stack", str(props["stack"])]
    if props.get("stacks_dir"):
        command += ["--stacks-dir", str(props["stacks_dir"])]
    return [*command, "--json"]


def run_verify(props: dict[str, Any]) -> dict[str, Any]:
    """Counts of the run; raises VerificationError naming every failing node and check."""
    done = subprocess.run(
        verify_command(props), capture_output=True, text=True, timeout=TIMEOUT_S, check=False
    )
    try:
        report = json.loads(done.stdout)
    except json.JSONDecodeError:
        tail = (done.stderr or done.stdout).strip()[-2000:]
        raise VerificationError(f"sparkrack verify exited {done.returncode}: {tail}") from None
    results = report["results"]
    counts = {o: sum(r["outcome"] == o for r in results) for o in ("passed", "failed", "skipped")}
    if done.returncode != 0:
        raise VerificationError(failure_message(str(props["stack"]), results, done.returncode))
    return counts


def failure_message(stack: str, results: list[dict[str, Any]], status: int) -> str:
    failed = [r for r in results if r["outcome"] == "failed"]
    if not failed:
        return f"stack {stack}: sparkrack verify exited {status} without a failing check"
    lines = [f"{r['node']} {r['id']}: {r['detail']}" for r in failed[:SHOWN_FAILURES]]
    more = len(failed) - len(lines)
    return (
        f"stack {stack}: {len(failed)} verification checks failed:\n  "
        + "\n  ".join(lines)
        + (f"\n  ... and {more} more (sparkrack verify --stack {stack})" if more else "")
    )


class Verification(Resource, module=PULUMI_MODULE, name="Verification"):
    """Runs `sparkrack verify --stack STACK` when the Plan's digest changes."""

    passed: pulumi.Output[int]
    failed: pulumi.Output[int]
    skipped: pulumi.Output[int]

    def __init__(
        self,
        name: str,
        stack: str,
        digest: str,
        stacks_dir: str | None = None,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        inputs = {
            "stack": stack,
            "digest": digest,
            "stacks_dir": stacks_dir,
            "passed": None,
            "failed": None,
            "skipped": None,
        }
        super().__init__(VerificationProvider(), name, inputs, opts)

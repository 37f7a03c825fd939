"""Verification at the end of `pulumi up`: `sparkrack verify` run locally on the Plan just deployed.

A one-shot action with nothing on a node to read back, so it is a `pulumi_command` local
Command, not a resource of ours (the rule: see this package's docstring). The program hands the
command its Plan as JSON on stdin (`--plan -`): the checks hold the nodes to the very Plan the
program built, with no stack file read again. Its triggers are the stack and the Plan's digest:
it runs on create and again only when the Plan changes, and a refresh does not re-run it. A failed
check fails it, and so `pulumi up`, with the failing nodes and checks in the engine's output.
"""

from __future__ import annotations

import shlex
import sys

import pulumi
from pulumi_command import local

TIMEOUT_S = 900


def verify_command() -> str:
    """The shell line: this interpreter's sparkrack (the program's virtualenv), bounded in time,
    reading the Plan from its stdin."""
    args = [sys.executable, "-m", "sparkrack.cli", "verify", "--plan", "-", "--summary"]
    return f"timeout {TIMEOUT_S} {shlex.join(args)}"


def verification(
    name: str,
    stack: str,
    digest: str,
    plan_json: str,
    opts: pulumi.ResourceOptions | None = None,
) -> local.Command:
    """Runs `sparkrack verify --plan -` on `plan_json` when the Plan's digest changes."""
    command = verify_command()
    return local.Command(
        name,
        create=command,
        update=command,
        stdin=plan_json,
        triggers=[stack, digest],
        logging=local.Logging.STDOUT_AND_STDERR,
        opts=opts,
    )

"""Verification at the end of `pulumi up`: `sparkrack verify` run locally, triggered by the Plan.

A one-shot action with nothing on a node to read back, so it is a `pulumi_command` local
Command, not a resource of ours (the rule: see this package's docstring). Its triggers are the
stack, the Plan's digest and the stack files' folder: it runs on create and again only when one of
them changes, and a refresh does not re-run it. The command refuses to check a Plan other than the
one deployed (`--digest`), and a failed check fails it, and so `pulumi up`, with the failing
nodes and checks in the engine's output.
"""

from __future__ import annotations

import shlex
import sys

import pulumi
from pulumi_command import local

TIMEOUT_S = 900


def verify_command(stack: str, digest: str, stacks_dir: str | None) -> str:
    """The shell line: this interpreter's sparkrack (the program's virtualenv), bounded in time."""
    args = [sys.executable, "-m", "sparkrack.cli", "verify", "--stack", stack, "--summary"]
    args += ["--digest", digest]
    if stacks_dir:
        args += ["--stacks-dir", stacks_dir]
    return f"timeout {TIMEOUT_S} {shlex.join(args)}"


def verification(
    name: str,
    stack: str,
    digest: str,
    stacks_dir: str | None = None,
    opts: pulumi.ResourceOptions | None = None,
) -> local.Command:
    """Runs `sparkrack verify --stack STACK` when the Plan's digest changes."""
    command = verify_command(stack, digest, stacks_dir)
    return local.Command(
        name,
        create=command,
        update=command,
        triggers=[stack, digest, stacks_dir or ""],
        logging=local.Logging.STDOUT_AND_STDERR,
        opts=opts,
    )

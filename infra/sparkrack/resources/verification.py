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


def verify_command(image_id: str | None = None) -> str:
    """The shell line: this interpreter's sparkrack (the program's virtualenv), bounded in time,
    reading the Plan from its stdin; with the engine image id the deploy made, when it made one."""
    args = [sys.executable, "-m", "sparkrack.cli", "verify", "--plan", "-", "--summary"]
    args += ["--image-id", image_id] if image_id else []
    return f"timeout {TIMEOUT_S} {shlex.join(args)}"


def verification(
    name: str,
    stack: str,
    digest: str,
    handed: tuple[str, pulumi.Output[str] | None],
    opts: pulumi.ResourceOptions | None = None,
) -> local.Command:
    """Runs `sparkrack verify --plan -` on the Plan's JSON when the Plan's digest or the engine
    image changes: `handed` is the JSON and the engine image's id (None without an engine)."""
    plan_json, image_id = handed
    command = pulumi.Output.from_input(image_id).apply(verify_command)
    triggers: list[pulumi.Input[str]] = [stack, digest, *([image_id] if image_id else [])]
    return local.Command(
        name,
        create=command,
        update=command,
        stdin=plan_json,
        triggers=triggers,
        logging=local.Logging.STDOUT_AND_STDERR,
        opts=opts,
    )

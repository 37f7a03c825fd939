"""The claims the other stacks of this project recorded in its backend (plan/claims.py), read
with the Pulumi CLI before any node is touched: `pulumi stack ls --json` once, then
`pulumi stack output --json` of each other stack that holds resources, a few at a time. A stack
never deployed, or destroyed, holds none and costs no call. Claims are plain outputs: reading
them needs no other stack's passphrase (a secret output reads `[secret]`).

What cannot be read is said, not refused: the comparison then covers the stacks that were read.
"""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from sparkrack.ops import deployed
from sparkrack.ops.deployed import NotDeployed
from sparkrack.plan.claims import Claims

CLAIMS_OUTPUT = "claims"
# `sparkrack plan` reads the backend only when the environment names it, as `scripts/dev env`
# does; the program always does (the engine running it has one).
BACKEND_ENV = "PULUMI_BACKEND_URL"
READERS = 4  # CLI calls at once: each is a short process that mostly waits on the state


@dataclass
class OtherClaims:
    claims: dict[str, Claims] = field(default_factory=dict)  # stack -> what it recorded
    unread: list[str] = field(default_factory=list)  # why a stack was not compared, one line each


def backend_named() -> bool:
    return bool(os.environ.get(BACKEND_ENV))


def other_claims(stack: str, project_dir: Path) -> OtherClaims:
    """What every other stack of the project's backend claims, by the name a stack's `takeover`
    gives it, and what could not be read."""
    found = OtherClaims()
    try:
        others = deployed_stacks(project_dir, but=stack)
    except (NotDeployed, ValueError) as error:  # ValueError: not JSON
        found.unread.append(f"the other stacks were not listed: {error}; no node is compared")
        return found
    with ThreadPoolExecutor(max_workers=READERS) as pool:
        reads = pool.map(lambda other: _claims_of(other, project_dir), others)
        for other, read in zip(others, reads, strict=True):
            if isinstance(read, str):
                found.unread.append(read)
                continue
            held = found.claims.get(short_name(other), Claims(nodes=()))
            found.claims[short_name(other)] = Claims(nodes=held.nodes + read.nodes)
    return found


def short_name(listed: str) -> str:
    """A stack's own name: Pulumi Cloud lists `org/project/stack`, a file backend `stack`."""
    return listed.rsplit("/", 1)[-1]


def deployed_stacks(project_dir: Path, but: str) -> list[str]:
    """The project's stacks that may hold resources (`pulumi stack ls --json`; a count of 0
    says none) as listed, `but` left out."""
    listed = json.loads(deployed.pulumi_cli(["stack", "ls", "--json"], project_dir) or "[]")
    entries = (
        [entry for entry in listed if isinstance(entry, dict)] if isinstance(listed, list) else []
    )
    return [
        str(entry["name"])
        for entry in entries
        if "name" in entry
        and short_name(str(entry["name"])) != but
        and entry.get("resourceCount") != 0
    ]


def _claims_of(stack: str, project_dir: Path) -> Claims | str:
    """The stack's recorded claims, or why they were not read."""
    try:
        recorded = deployed.stack_outputs(stack, project_dir).get(CLAIMS_OUTPUT)
    except (NotDeployed, ValueError) as error:
        return f"{error}; its nodes are not compared"
    if recorded is None:
        return (
            f"stack {stack} records no claims (its last `up` predates them, or failed):"
            " its nodes are not compared"
        )
    try:
        return Claims.model_validate(recorded)
    except ValidationError:
        return (
            f"stack {stack}: its `{CLAIMS_OUTPUT}` output is not a list of claims;"
            " its nodes are not compared"
        )

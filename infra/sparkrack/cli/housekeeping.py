"""`sparkrack images list|prune` and `sparkrack weights list|prune` (sparkrack.ops.housekeeping).

`list` and a bare `prune` change nothing; `prune --yes` removes what nothing needs. A node that
cannot be read or pruned is one line on stderr naming it, and the exit status is 1.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from functools import partial
from typing import Any

from sparkrack.cli.ops import OpsErrors
from sparkrack.cli.options import guarded
from sparkrack.config.load import load_stack_file
from sparkrack.ops.housekeeping import Kind, gather_holdings, prune, render
from sparkrack.plan import make_plan
from sparkrack.transport.ssh import close_all

WHAT = {
    "images": "the service user's container images on every node",
    "weights": "the model repositories in every node's Hugging Face cache",
}


def add_housekeeping(commands: Any, stack_options: argparse.ArgumentParser) -> None:
    for kind in ("images", "weights"):
        command = commands.add_parser(kind, help=f"list or prune {WHAT[kind]}")
        actions = command.add_subparsers(dest="action", required=True, metavar="ACTION")
        listing = actions.add_parser(
            "list", parents=[stack_options], help="what each node holds, and why it stays"
        )
        pruning = actions.add_parser(
            "prune",
            parents=[stack_options],
            help="remove what the Plan does not use (a dry run without --yes)",
        )
        pruning.add_argument("--yes", action="store_true", help="remove them (not a dry run)")
        for action, parser in (("list", listing), ("prune", pruning)):
            parser.add_argument("--json", action="store_true", help="print the rows as JSON")
            parser.set_defaults(run=partial(run, kind, action))


def run(kind: Kind, action: str, args: argparse.Namespace) -> int:
    try:
        said = f"sparkrack {kind}: stack {args.stack}"
        return guarded(said, OpsErrors, lambda: housekeep(kind, action, args))
    finally:
        close_all()


def housekeep(kind: Kind, action: str, args: argparse.Namespace) -> int:
    plan = make_plan(load_stack_file(args.stack, args.stacks_dir))
    held, errors = gather_holdings(plan, kind)
    said = "kept; `prune --yes` removes them"
    if action == "prune":
        said = "would be removed by `prune --yes` (dry run)"
        if getattr(args, "yes", False):
            errors |= prune(plan, kind, held)
            said = "removed" + (" (not on the nodes named below)" if errors else "")
    if args.json:
        rows = [asdict(item) for item in held]
        print(json.dumps({"stack": plan.stack, kind: rows, "errors": errors, "action": said}))
    else:
        print(render(kind, plan.stack, held, said))
    for node, error in sorted(errors.items()):
        print(f"sparkrack {kind}: stack {plan.stack}: node {node}: {error}", file=sys.stderr)
    return 1 if errors else 0

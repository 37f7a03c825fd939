"""The `inventory` and `verify` subcommands; `sparkrack.cli` lists their registrations."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from sparkrack.cli.options import stack_options
from sparkrack.verify.inventory import ROLES
from sparkrack.verify.runner import SUITE_BROKEN, inventory_for, verify


def add_inventory(commands: Any) -> None:
    command = commands.add_parser(
        "inventory",
        parents=[stack_options()],
        help="what the checks read, as JSON: the Plan itself and the roles this build deploys",
    )
    command.add_argument("--out", type=Path, help="write to FILE instead of stdout")
    add_roles_option(command)
    command.set_defaults(run=run_inventory)


def add_roles_option(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--roles",
        type=roles_list,
        help="check these roles (comma-separated) instead of those this build deploys",
    )


def roles_list(text: str) -> tuple[str, ...]:
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    unknown = [name for name in names if name not in ROLES]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown role {unknown[0]!r}; roles: {', '.join(ROLES)}")
    return names


def run_inventory(args: argparse.Namespace) -> int:
    text = inventory_for(args.stack, args.stacks_dir, args.roles).model_dump_json(indent=2) + "\n"
    if args.out:
        args.out.write_text(text)
    else:
        sys.stdout.write(text)
    return 0


def add_verify(commands: Any) -> None:
    command = commands.add_parser(
        "verify",
        parents=[stack_options()],
        help="check every promise of the Plan on the live nodes (exit 1 on any failure)",
    )
    shown = command.add_mutually_exclusive_group()
    shown.add_argument("--json", action="store_true", help="every check's outcome as JSON")
    shown.add_argument(
        "--summary", action="store_true", help="one line of counts, or only the failing checks"
    )
    command.add_argument(
        "--digest",
        help="refuse to check unless the stack plans to this digest (the one deployed)",
    )
    add_roles_option(command)
    command.set_defaults(run=run_verify)


def run_verify(args: argparse.Namespace) -> int:
    inventory = inventory_for(args.stack, args.stacks_dir, args.roles)
    if args.digest and args.digest != inventory.digest:
        print(
            f"sparkrack verify: stack {args.stack} now plans digest {inventory.digest}, "
            f"not the {args.digest} deployed: run `pulumi up` again",
            file=sys.stderr,
        )
        return SUITE_BROKEN
    outcome = verify(inventory)
    if outcome.status == SUITE_BROKEN:
        print(outcome.output, file=sys.stderr)
        print(
            f"sparkrack verify: the suite broke (pytest exit {outcome.exit_status})",
            file=sys.stderr,
        )
    if args.json:
        print(json.dumps(outcome.as_json(), indent=2))
    else:
        print(outcome.summary() if args.summary else outcome.table())
    return outcome.status

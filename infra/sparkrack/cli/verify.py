"""The `inventory` and `verify` subcommands; `sparkrack.cli` lists their registrations.

Both read a Plan already made, never a stack file: the one `up` hands them (`--plan -`: the
program's own, on stdin), or the one a stack's last `up` exported (`--stack`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from sparkrack.config.load import default_stacks_dir
from sparkrack.ops.deployed import NotDeployed, deployed_plan_and_image
from sparkrack.plan import Plan
from sparkrack.stackspec.roles import ROLE_NAMES
from sparkrack.verify.inventory import Inventory, build_inventory
from sparkrack.verify.runner import SUITE_BROKEN, verify


class NoPlan(Exception):
    """No Plan to check; the message says why, in one line."""


def plan_options() -> argparse.ArgumentParser:
    """Where the Plan comes from: a deployed stack's state, or JSON handed in."""
    options = argparse.ArgumentParser(add_help=False)
    source = options.add_mutually_exclusive_group(required=True)
    source.add_argument("--stack", help="a deployed stack: the Plan its last `up` exported")
    source.add_argument("--plan", help="a Plan as JSON, from FILE or `-` (stdin), as `up` hands it")
    options.add_argument(
        "--stacks-dir",
        type=Path,
        help="with --stack: the stack files' folder, in the Pulumi project whose state is read "
        "(default: $SPARKRACK_STACKS_DIR, else ./stacks)",
    )
    options.add_argument(
        "--image-id",
        help="with --plan: the engine image id the deploy made (as `up` hands it); every node's "
        "image is held to it (with --stack: read from the stack's outputs)",
    )
    options.add_argument(
        "--roles",
        type=roles_list,
        help="check only these of the Plan's roles (comma-separated)",
    )
    return options


def roles_list(text: str) -> tuple[str, ...]:
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    unknown = [name for name in names if name not in ROLE_NAMES]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown role {unknown[0]!r}; roles: {', '.join(ROLE_NAMES)}"
        )
    return names


def plan_to_check(args: argparse.Namespace) -> tuple[Plan, str | None]:
    """The Plan handed in (`--plan`, with `--image-id`), else the one the stack's last `up`
    exported, with the engine image id it made."""
    if args.plan is None:
        project = (args.stacks_dir or default_stacks_dir()).resolve().parent
        try:
            return deployed_plan_and_image(args.stack, project)
        except NotDeployed as error:
            raise NoPlan(str(error)) from None
    return plan_handed_in(args), args.image_id


def plan_handed_in(args: argparse.Namespace) -> Plan:
    source = "stdin" if args.plan == "-" else args.plan
    try:
        text = sys.stdin.read() if args.plan == "-" else Path(args.plan).read_text()
        return Plan.model_validate_json(text)
    except OSError as error:
        raise NoPlan(f"--plan {source}: {error.strerror or error}") from None
    except ValidationError as error:
        raise NoPlan(f"--plan {source} is not a Plan: {first_error(error)}") from None


def first_error(error: ValidationError) -> str:
    problem = error.errors()[0]
    where = ".".join(str(part) for part in problem["loc"])
    return f"{where}: {problem['msg']}" if where else str(problem["msg"])


def inventory_to_check(args: argparse.Namespace, command: str) -> Inventory | None:
    """The Plan and the roles checked, or None with the one line that says why there is none."""
    try:
        plan, image_id = plan_to_check(args)
        return build_inventory(plan, args.roles, image_id)
    except NoPlan as error:
        print(f"sparkrack {command}: {error}", file=sys.stderr)
        return None


def add_inventory(commands: Any) -> None:
    command = commands.add_parser(
        "inventory",
        parents=[plan_options()],
        help="what the checks read, as JSON: the Plan itself and the roles checked",
    )
    command.add_argument("--out", type=Path, help="write to FILE instead of stdout")
    command.set_defaults(run=run_inventory)


def run_inventory(args: argparse.Namespace) -> int:
    inventory = inventory_to_check(args, "inventory")
    if inventory is None:
        return SUITE_BROKEN
    text = inventory.model_dump_json(indent=2) + "\n"
    if args.out:
        args.out.write_text(text)
    else:
        sys.stdout.write(text)
    return 0


def add_verify(commands: Any) -> None:
    command = commands.add_parser(
        "verify",
        parents=[plan_options()],
        help="check every promise of the deployed Plan on the live nodes (exit 1 on any failure)",
    )
    shown = command.add_mutually_exclusive_group()
    shown.add_argument("--json", action="store_true", help="every check's outcome as JSON")
    shown.add_argument(
        "--summary", action="store_true", help="one line of counts, or only the failing checks"
    )
    command.set_defaults(run=run_verify)


def run_verify(args: argparse.Namespace) -> int:
    inventory = inventory_to_check(args, "verify")
    if inventory is None:
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

"""`sparkrack`: plans and estimates from stack files, without the Pulumi engine.

Each subcommand is registered by one function in `COMMANDS` (`plan`, `estimate`; others add
theirs). A refused stack or a usage error prints one clear line per problem to stderr and
exits 2, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

from sparkrack.cli import ops
from sparkrack.cli.hostkeys import add_hostkeys as _add_hostkeys
from sparkrack.cli.housekeeping import add_housekeeping
from sparkrack.cli.model import add_model
from sparkrack.cli.monitoring import add_monitoring as _add_monitoring
from sparkrack.cli.options import ERROR_EXIT, positive_int, stack_options
from sparkrack.cli.report import render_blast_radius, render_estimate, render_plan
from sparkrack.cli.sim import add_parser as _add_sim
from sparkrack.cli.verify import add_inventory as _add_inventory
from sparkrack.cli.verify import add_verify as _add_verify
from sparkrack.config.decode_files import CalibrationError, read_rows
from sparkrack.config.load import (
    default_stacks_dir,
    load_stack_file,
    refuse_unplannable,
    spec_for_estimate,
)
from sparkrack.estimate.calibration import shipped_constants, shipped_rows
from sparkrack.estimate.decode import DecodeConstants
from sparkrack.estimate.decode_fit import refit
from sparkrack.ops import claims as backend_claims
from sparkrack.ops.deployed import NotDeployed, deployed_engine
from sparkrack.plan import DecodeOptions, Plan, estimate, make_plan
from sparkrack.plan.claims import Claims, refuse_claimed
from sparkrack.plan.perf import DEFAULT_CONTEXT_TOKENS, with_weight_format
from sparkrack.plan.rollout import blast_radius
from sparkrack.stackspec import deploy_needs
from sparkrack.stackspec.errors import SpecError

Subparsers = Any  # argparse's _SubParsersAction is private; it is what add_subparsers returns


class UsageError(Exception):
    """What argparse would print before exiting; raised instead so `main` returns ERROR_EXIT."""


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message}")


def _add_plan(commands: Subparsers) -> None:
    command = commands.add_parser(
        "plan", parents=[stack_options()], help="every node's desired state, as tables or JSON"
    )
    command.add_argument("--json", action="store_true", help="the whole Plan as JSON")
    command.add_argument(
        "--against",
        action="store_true",
        help="what `up` would do to the deployed stack: restarts, weights moved, downtime",
    )
    command.set_defaults(run=_run_plan)


def _run_plan(args: argparse.Namespace) -> int:
    spec = refuse_unplannable(load_stack_file(args.stack, args.stacks_dir))
    plan = make_plan(spec)
    if backend_claims.backend_named():
        refuse_claimed(plan, _other_claims(args))
    if args.against:
        return _run_against(plan, args)
    needs = [problem.describe() for problem in deploy_needs(spec)]
    if args.json:
        dumped = {"digest": plan.digest(), **plan.model_dump(mode="json"), "deploy_needs": needs}
        print(json.dumps(dumped, indent=2))
    else:
        print(render_plan(plan))
    for need in needs:  # planned all the same: `up` refuses until they are given
        print(f"sparkrack plan: stack {spec.stack}: before `up`: {need}", file=sys.stderr)
    return 0


def _project_dir(args: argparse.Namespace) -> Path:
    """The project of the stack files (their Pulumi.yaml), where the Pulumi CLI is run."""
    stacks_dir: Path = args.stacks_dir or default_stacks_dir()
    return stacks_dir.resolve().parent


def _other_claims(args: argparse.Namespace) -> dict[str, Claims]:
    """What the backend's other stacks claim; what could not be read is said on stderr."""
    others = backend_claims.other_claims(args.stack, _project_dir(args))
    for unread in others.unread:
        print(f"sparkrack plan: stack {args.stack}: claims: {unread}", file=sys.stderr)
    return others.claims


def _run_against(plan: Plan, args: argparse.Namespace) -> int:
    """The blast radius of the stack file's Plan against what its last `up` deployed."""
    try:
        deployed = deployed_engine(args.stack, _project_dir(args))
    except NotDeployed as error:
        print(f"sparkrack plan --against: {error}", file=sys.stderr)
        return 1
    radius = blast_radius(plan, deployed.engine, deployed.last_downtime_s)
    print(radius.model_dump_json(indent=2) if args.json else render_blast_radius(radius))
    return 0


def _add_estimate(commands: Subparsers) -> None:
    command = commands.add_parser(
        "estimate", help="fit and decode speed of a model on N nodes, before buying them"
    )
    model = command.add_mutually_exclusive_group(required=True)
    model.add_argument("--model", help="a catalogue model, e.g. minimax-m2.7-awq")
    model.add_argument("--model-file", type=Path, help="a model YAML in the catalogue's schema")
    command.add_argument(
        "--hardware",
        required=True,
        help="a catalogue profile: gb10, gx10, h100-8, h200-8, b200-8, h20-8",
    )
    command.add_argument("--nodes", type=positive_int, default=1)
    command.add_argument("--tp", type=positive_int, help="tensor parallel size (default: auto)")
    command.add_argument("--pp", type=positive_int, help="pipeline parallel size (default: auto)")
    command.add_argument(
        "--context", type=positive_int, help="max_model_len (default: the model's)"
    )
    _add_decode_options(command)
    command.add_argument("--json", action="store_true")
    command.set_defaults(run=_run_estimate)


def _add_decode_options(command: argparse.ArgumentParser) -> None:
    known = shipped_constants()
    command.add_argument(
        "--engine", choices=known.engines, help="the engine the decode model assumes (vllm)"
    )
    command.add_argument(
        "--weight-format",
        choices=sorted(known.formats),
        help="weights at this format's nominal size (default: the model's)",
    )
    command.add_argument(
        "--speculative",
        action=argparse.BooleanOptionalAction,
        help="speculative decoding (MTP / a draft model) on or off",
    )
    command.add_argument(
        "--concurrency",
        type=positive_int,
        metavar="N",
        help="streams decoding at once: per-request and aggregate tok/s, whether their KV cache"
        " fits, and where more stop paying (default: the stack's max_num_seqs, or 1)",
    )
    command.add_argument(
        "--decode-context",
        type=positive_int,
        default=DEFAULT_CONTEXT_TOKENS,
        help=f"tokens in the cache while decoding (default {DEFAULT_CONTEXT_TOKENS})",
    )
    command.add_argument(
        "--calibration",
        type=Path,
        nargs="+",
        metavar="FILE",
        help="refit the decode model with these rows too (`sparkrack bench` writes them)",
    )


def _run_estimate(args: argparse.Namespace) -> int:
    spec = spec_for_estimate(
        hardware=args.hardware,
        nodes=args.nodes,
        model=args.model,
        model_file=args.model_file,
        tensor_parallel_size=args.tp,
        pipeline_parallel_size=args.pp,
        max_model_len=args.context,
    )
    try:
        constants = _constants(args.calibration)
    except CalibrationError as error:
        print(f"sparkrack estimate: {error}", file=sys.stderr)
        return ERROR_EXIT
    if args.weight_format:
        spec = with_weight_format(spec, args.weight_format, constants)
    options = DecodeOptions(
        engine=args.engine,
        speculative=args.speculative,
        context_tokens=args.decode_context,
        concurrency=args.concurrency,
        constants=constants,
    )
    result = estimate(spec, options)
    print(json.dumps(result.flat(), indent=2) if args.json else render_estimate(result))
    return 0


def _constants(calibration: list[Path] | None) -> DecodeConstants:
    """The shipped fit, or one refitted with the rack's own rows beside the published ones."""
    shipped = shipped_constants()
    if not calibration:
        return shipped
    rack = read_rows(calibration)
    print(f"refitting the decode model with {len(rack)} rows of yours", file=sys.stderr)
    return refit([*shipped_rows(), *rack], shipped)


def _add_ops(commands: Subparsers) -> None:
    for add in (ops.add_bench, ops.add_cost, ops.add_doctor, add_housekeeping, add_model):
        add(commands, stack_options())


COMMANDS: list[Callable[[Subparsers], None]] = [
    _add_plan,
    _add_estimate,
    _add_sim,
    _add_inventory,
    _add_verify,
    _add_ops,
    _add_monitoring,
    _add_hostkeys,
]


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="sparkrack", description="Plan and deploy GB10 / GPU-server LLM clusters.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for register in COMMANDS:
        register(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        result: int = args.run(args)
        return result
    except UsageError as error:
        print(f"{error}", file=sys.stderr)
    except SpecError as error:
        print(f"sparkrack: {error}", file=sys.stderr)
    except BrokenPipeError:
        # The reader left (`sparkrack plan ... | head`): not an error, and no traceback at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    return ERROR_EXIT

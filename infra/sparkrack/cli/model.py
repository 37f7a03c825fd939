"""`sparkrack model pin --stack X [--repo ORG/NAME] [--revision main]`: the stack's model
repository resolved to its current commit and written into the stack file (ops/model_pin.py).

The file is written only when the edited stack loads and names that repository and commit; the
Hub is asked with huggingface_hub's own token and endpoint (HF_TOKEN, HF_ENDPOINT)."""

from __future__ import annotations

import argparse
import datetime
import os
import sys
from pathlib import Path
from typing import Any

from sparkrack.config.load import load_stack_file, spec_from_document, stack_path
from sparkrack.config.yamlload import load_stack_yaml
from sparkrack.ops.model_pin import Pin, PinError, pinned_text, resolve


def add_model(commands: Any, stack_options: argparse.ArgumentParser) -> None:
    command = commands.add_parser("model", help="the stack's model: pin its weights' commit")
    actions = command.add_subparsers(dest="action", required=True, metavar="ACTION")
    pin = actions.add_parser(
        "pin",
        parents=[stack_options],
        help="resolve the model's repository to its current commit and write both into the stack",
    )
    pin.add_argument("--repo", help="ORG/NAME on the Hub (default: the stack's model.hf_repo)")
    pin.add_argument("--revision", default="main", help="the branch or tag to resolve (main)")
    pin.set_defaults(run=run_pin)


def run_pin(args: argparse.Namespace) -> int:
    spec = load_stack_file(args.stack, args.stacks_dir)
    repo = args.repo or spec.model.hf_repo
    if repo is None:
        return said(args.stack, f"{spec.model.name} names no repository: give --repo ORG/NAME")
    path = stack_path(args.stack, args.stacks_dir)
    try:
        pin = resolve(repo, args.revision)
        today = datetime.datetime.now(datetime.UTC).date().isoformat()
        text = pinned_text(path.read_text(), pin, f"{pin.revision} on {today}: sparkrack model pin")
        write_checked(args.stack, path, text, pin)
    except PinError as error:
        return said(args.stack, str(error))
    print(f"stack {args.stack}: model {spec.model.name} pinned to {pin.repo}@{pin.commit}")
    return 0


def said(stack: str, message: str) -> int:
    print(f"sparkrack model pin: stack {stack}: {message}", file=sys.stderr)
    return 1


def write_checked(stack: str, path: Path, text: str, pin: Pin) -> None:
    """Replace the stack file with `text` once it loads (a SpecError says why not, the file
    untouched) and names `pin`; by a rename, so no reader sees half a file."""
    model = spec_from_document(stack, load_stack_yaml(text), path).model
    if (model.hf_repo, model.revision) != (pin.repo, pin.commit):
        raise PinError(f"the edited stack names {model.hf_repo}@{model.revision}, not the pin")
    trial = path.with_name(f".{path.name}.model-pin")
    trial.write_text(text)
    os.chmod(trial, path.stat().st_mode & 0o777)
    trial.replace(path)

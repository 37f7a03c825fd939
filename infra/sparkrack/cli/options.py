"""What several subcommands share: the stack options, argument types, the exit status of a
failure and its one line, progress lines."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

# Every failure that is not a bug (a refused stack, a usage error, a node or an endpoint that does
# not answer) exits with this, after one line on stderr and no traceback.
ERROR_EXIT = 2


def stack_options() -> argparse.ArgumentParser:
    """`--stack` and `--stacks-dir`, for every subcommand that reads a stack file."""
    options = argparse.ArgumentParser(add_help=False)
    options.add_argument("--stack", required=True, help="stack name: stacks/Pulumi.<NAME>.yaml")
    options.add_argument(
        "--stacks-dir",
        type=Path,
        help="where the stack files are (default: $SPARKRACK_STACKS_DIR, else ./stacks)",
    )
    return options


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, not {text!r}")
    return value


def guarded(said: str, errors: tuple[type[Exception], ...], action: Callable[[], int]) -> int:
    """What `action` returns, or, on one of `errors`, `said: <error>` on stderr and ERROR_EXIT."""
    try:
        return action()
    except errors as error:
        print(f"{said}: {error}", file=sys.stderr)
        return ERROR_EXIT


def progress_printer() -> Callable[[str], None]:
    started = time.monotonic()

    def show(line: str) -> None:
        print(f"[{time.monotonic() - started:6.1f}s] {line}", file=sys.stderr, flush=True)

    return show

"""`sparkrack monitoring lint`; `sparkrack.cli` lists its registration."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from sparkrack.cli.options import stack_options

LINT_FAILED = 1


def add_monitoring(commands: Any) -> None:
    monitoring = commands.add_parser("monitoring", help="the dashboards against the live stack")
    actions = monitoring.add_subparsers(dest="monitoring_action", required=True)
    lint = actions.add_parser(
        "lint",
        parents=[stack_options()],
        help="run every dashboard query on the live Prometheus; exit 1 on a wrong label or a"
        " missing metric",
    )
    lint.set_defaults(run=run_lint)


def run_lint(args: argparse.Namespace) -> int:
    # Imported here: the Grafana SDK is a large import every other subcommand can do without.
    from sparkrack.ops.monitoring_lint import lint_stack, render

    rows = lint_stack(args.stack, args.stacks_dir)
    print(render(rows))
    failed = [row for row in rows if row.failed]
    if failed:
        print(
            f"sparkrack monitoring lint: stack {args.stack}: {len(failed)} of {len(rows)}"
            " panel queries are broken",
            file=sys.stderr,
        )
        return LINT_FAILED
    return 0

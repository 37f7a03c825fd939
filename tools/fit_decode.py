#!/usr/bin/env python3
"""Fit sparkrack's decode model to the calibration rows and print the per-row table.

    .venv/bin/python tools/fit_decode.py            # fit, print, leave the constants file alone
    .venv/bin/python tools/fit_decode.py --write    # ... and rewrite catalog/decode_model.yaml
    .venv/bin/python tools/fit_decode.py --calibration my-rack.yaml   # add your rack's rows

Rows: infra/sparkrack/catalog/calibration/decode-figures.yaml (published runs) plus any
--calibration files (`sparkrack bench` writes them). The fit starts from each constant's prior in
decode_model.yaml, so re-running it gives the same constants for the same rows.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "infra"))

from sparkrack.config.decode_files import read_rows, write_constants  # noqa: E402
from sparkrack.estimate.calibration import shipped_constants, shipped_rows  # noqa: E402
from sparkrack.estimate.decode_fit import card_table, refit, table_lines  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calibration", type=Path, nargs="*", default=[], help="more rows")
    parser.add_argument("--write", action="store_true", help="rewrite decode_model.yaml")
    parser.add_argument("--no-loo", action="store_true", help="skip leave-one-out (faster)")
    args = parser.parse_args()
    rows = shipped_rows() + read_rows(args.calibration)
    fitted = refit(rows, shipped_constants(), with_loo=not args.no_loo)
    print("\n".join(table_lines(rows, fitted)))
    print()
    for name, c in sorted(fitted.constants.items()):
        mark = "fitted" if c.fit else "fixed "
        print(f"  {mark} {name:28} {c.value:10.4g}  rows: {', '.join(c.rows) or '-'}")
    print()
    print("  error:", ", ".join(f"{key} {value}" for key, value in fitted.error.items()))
    if not args.no_loo:
        print()
        print("\n".join(card_table(rows, fitted)))
    if args.write:
        print(f"wrote {write_constants(fitted, len(rows))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

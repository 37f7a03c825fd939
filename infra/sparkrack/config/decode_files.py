"""The decode model's files: calibration rows read from a rack's own files (`sparkrack estimate
--calibration`, the fit script), and the constants file the fit script writes, with its provenance.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import yaml
from pydantic import ValidationError

from sparkrack import catalog
from sparkrack.config.yamlload import load_yaml
from sparkrack.estimate.calibration import CalibrationRow
from sparkrack.estimate.decode import DecodeConstants

HEADER = """\
# sparkrack's decode model: the constants of estimate/decode.py, each with its source.
#
# WRITTEN BY tools/fit_decode.py from catalog/calibration/decode-figures.yaml ({rows} rows):
# re-run it (with --write) after changing the rows, a prior or a fixed constant. `fit: true`
# constants are fitted (starting from `prior`, pulled weakly toward it); `rows` names the rows
# whose prediction moves by over 5% when the constant doubles. The others are fixed: their
# `source` says where they come from, and ASSUMED says nobody measured them.
#
# step time = weights read / (bandwidth x efficiency) + batch x KV reads + layers x layer_us
#             + all-reduces + pipeline hops; a step emits one token per stream of the batch (a
#             mixture of experts reads the union of the experts its streams route to:
#             expert_overlap). Speculative decoding: a step verifies draft_tokens + 1 positions a
#             stream after as many one-layer draft steps; each draft is accepted at
#             speculative_acceptance.
# efficiency = efficiency.<hardware class> x engine.<engine> x format.<group>
#              (x moe.<hardware class>.<format> for a mixture-of-experts model), at most 1.
# `error` is the fit's: in-sample, leave-one-out (each row predicted by a fit without it) and
# leave-one-card-out (each row by a fit without any row of its GPU model), over the rows in the
# fit; `rows` has each row's three errors. `sparkrack estimate` shows its range from the
# leave-one-out 10th and 90th percentiles.
"""


def write_constants(k: DecodeConstants, rows: int, path: Path | None = None) -> Path:
    target = path or Path(catalog.data_path("decode_model.yaml"))
    body = k.model_dump(mode="json", exclude_defaults=False)
    for constant in body["constants"].values():
        constant["value"] = float(f"{constant['value']:.4g}")
        constant["rows"] = list(constant["rows"])
        if not constant["fit"]:
            del constant["prior"], constant["rows"]
    text = yaml.safe_dump(
        body, sort_keys=False, width=100, allow_unicode=True, default_flow_style=None
    )
    target.write_text(HEADER.format(rows=rows) + text)
    return target


class CalibrationError(Exception):
    """A calibration file that cannot be read; the message names it."""


def read_rows(paths: Iterable[Path]) -> list[CalibrationRow]:
    """Rows from calibration files (`rows:` lists, as `sparkrack bench` writes them)."""
    rows = []
    for path in paths:
        try:
            raw = load_yaml(path.read_text())
            rows += [CalibrationRow.model_validate(item) for item in raw["rows"]]
        except (OSError, KeyError, TypeError, ValidationError) as error:
            first = str(error).splitlines()[0]
            raise CalibrationError(f"{path}: not a calibration file ({first})") from None
    return rows

"""Fitting the decode model's constants to calibration rows: plain Python, re-runnable.

The fitted constants (those marked `fit: true` in decode_model.yaml) are found in log space by
Levenberg-Marquardt on log(predicted / measured): a Huber loss, so that one odd row (a flagged
source, an engine's fixed-latency floor) does not drag the others, and a weak pull toward each
constant's prior, so that a constant only one row informs stays near its sourced value. The
error reported is leave-one-out: each row predicted by a fit made without it.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from sparkrack.estimate.calibration import CalibrationRow, predict
from sparkrack.estimate.decode import DecodeConstants

HUBER_DELTA = 0.2  # log units: beyond ~22% off, a row's pull grows linearly, not squared
PRIOR_WEIGHT = 0.05  # a 2x move from the prior costs what a ~25% miss on one row does
ITERATIONS = 60


def refit(
    rows: Sequence[CalibrationRow], k: DecodeConstants, with_loo: bool = True
) -> DecodeConstants:
    """The constants fitted to `rows`, with the per-row table, the error and what rows cover."""
    fitted = fit(rows, k)
    residuals = log_residuals(rows, fitted)
    loo = leave_one_out(rows, k) if with_loo else residuals
    loco = leave_one_card_out(rows, k) if with_loo else residuals
    informed = _informing_rows(rows, fitted)
    constants = {
        name: c.model_copy(update={"rows": informed.get(name, ())}) if c.fit else c
        for name, c in fitted.constants.items()
    }
    return fitted.model_copy(
        update={
            "constants": constants,
            "error": error_summary(rows, residuals, loo, loco),
            "coverage": coverage(rows, k),
            "rows": row_table(rows, fitted, loo, loco),
        }
    )


def table_lines(rows: Sequence[CalibrationRow], k: DecodeConstants) -> list[str]:
    """The per-row table the fit reports: measured, predicted, error, and the row's setup."""
    lines = [f"{'row':5} {'measured':>9} {'predicted':>9} {'error':>7}  setup"]
    for row in rows:
        predicted = predict(row, k)
        error = 100 * (predicted / row.tok_s - 1)
        setup = f"{row.hardware} {row.engine} {row.weight_format} tp{row.tp} pp{row.pp}"
        flags = f" [{','.join(row.flags)}]" if row.flags else ""
        lines.append(
            f"{row.id:5} {row.tok_s:9.2f} {predicted:9.2f} {error:+6.1f}%"
            f"  {row.model}; {setup}{flags}"
        )
    return lines


def _informing_rows(
    rows: Sequence[CalibrationRow], k: DecodeConstants
) -> dict[str, tuple[str, ...]]:
    """Per fitted constant, the rows in the fit whose prediction moves by over 5% when it
    doubles (a row kept out of the fit informs nothing)."""
    names = fitted_names(k)
    point = [math.log(k.constants[n].value) for n in names]
    base = log_residuals(rows, k)
    columns = _jacobian(rows, k, names, point, base)
    return {
        name: tuple(
            row.id
            for row, d in zip(rows, column, strict=True)
            if row.weight > 0 and abs(d) * 0.69 > 0.05
        )
        for name, column in zip(names, columns, strict=True)
    }


def fitted_names(k: DecodeConstants) -> list[str]:
    return sorted(name for name, c in k.constants.items() if c.fit)


def log_residuals(rows: Sequence[CalibrationRow], k: DecodeConstants) -> list[float]:
    """log(measured / predicted) per row: positive when the model is too slow."""
    return [math.log(row.tok_s / predict(row, k)) for row in rows]


def fit(rows: Sequence[CalibrationRow], k: DecodeConstants) -> DecodeConstants:
    names = fitted_names(k)
    priors = [math.log(k.constants[n].prior or k.constants[n].value) for n in names]
    point = [math.log(k.constants[n].value) for n in names]
    damping = 1e-2
    best = _objective(rows, k, names, point, priors)
    for _ in range(ITERATIONS):
        step = _step(rows, k, names, point, priors, damping)
        trial = [p + s for p, s in zip(point, step, strict=True)]
        value = _objective(rows, k, names, trial, priors)
        if value < best:
            point, best, damping = trial, value, max(damping / 3, 1e-6)
            if max(abs(s) for s in step) < 1e-5:
                break
        else:
            damping *= 4
    return _at(k, names, point)


def leave_one_out(rows: Sequence[CalibrationRow], k: DecodeConstants) -> list[float]:
    """Each row's log residual under a fit made without it."""
    out = []
    for index, row in enumerate(rows):
        others = [r for i, r in enumerate(rows) if i != index]
        out += log_residuals([row], fit(others, k))
    return out


def leave_one_card_out(rows: Sequence[CalibrationRow], k: DecodeConstants) -> list[float]:
    """Each row's log residual under a fit made without any row of its card (GPU model): how
    the model does on hardware it has never seen a run of."""
    fits = {
        card: fit([r for r in rows if r.card_name != card], k)
        for card in {row.card_name for row in rows}
    }
    return [log_residuals([row], fits[row.card_name])[0] for row in rows]


def error_summary(
    rows: Sequence[CalibrationRow],
    residuals: Sequence[float],
    loo: Sequence[float],
    loco: Sequence[float],
) -> dict[str, float]:
    """In-sample, leave-one-out and leave-one-card-out error. The medians count the rows in the
    fit (weight > 0); rows kept out of it (flagged anomalies) are in the per-row table only."""
    fitted = [i for i, row in enumerate(rows) if row.weight > 0]
    return {
        "median_abs_pct": round(100 * _abs_pct_median([residuals[i] for i in fitted]), 1),
        "max_abs_pct": round(100 * max(_abs_pct(residuals[i]) for i in fitted), 1),
        "loo_median_abs_pct": round(100 * _abs_pct_median([loo[i] for i in fitted]), 1),
        "loo_max_abs_pct": round(100 * max(_abs_pct(loo[i]) for i in fitted), 1),
        "loco_median_abs_pct": round(100 * _abs_pct_median([loco[i] for i in fitted]), 1),
        "loco_all_rows_median_abs_pct": round(100 * _abs_pct_median(loco), 1),
        "loo_p10_log": round(_quantile([loo[i] for i in fitted], 0.1), 3),
        "loo_p90_log": round(_quantile([loo[i] for i in fitted], 0.9), 3),
    }


def card_table(rows: Sequence[CalibrationRow], k: DecodeConstants) -> list[str]:
    """Per card, over its rows in the fit: median absolute error in sample, leave-one-out and
    leave-one-card-out (the fit's row table, `refit` with leave-one-out)."""
    lines = [
        "| card | rows | in sample | leave-one-out | leave-one-card-out | worst, card out |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for card in sorted({row.card_name for row in rows}):
        errors = [k.rows[row.id] for row in rows if row.card_name == card and row.weight > 0]
        if errors:
            lines.append(f"| {card} | {len(errors)} | " + " | ".join(_card_cells(errors)) + " |")
    return lines


def _card_cells(errors: Sequence[dict[str, float]]) -> list[str]:
    def median(key: str) -> float:
        return statistics.median(abs(e[key]) for e in errors)

    worst = max(abs(e["loco_error_pct"]) for e in errors)
    return [f"{median(key):.1f}%" for key in _ERROR_KEYS] + [f"{worst:.1f}%"]


_ERROR_KEYS = ("error_pct", "loo_error_pct", "loco_error_pct")


def coverage(rows: Sequence[CalibrationRow], k: DecodeConstants) -> dict[str, tuple[str, ...]]:
    """Which hardware, engines, formats and interconnects the rows cover, for `outside` notes."""
    found: dict[str, set[str]] = {
        "hardware": set(), "hardware_engine": set(), "engine_format": set(),
        "hardware_moe": set(), "interconnect": set(), "engine_tp": set(), "speculative": set(),
    }  # fmt: skip
    for row in rows:
        found["hardware"].add(row.hardware_class)
        found["hardware_engine"].add(f"{row.hardware_class}/{row.engine}")
        found["engine_format"].add(f"{row.engine}/{k.format_group(row.weight_format)}")
        if row.moe:
            found["hardware_moe"].add(row.hardware_class)
        if row.tp > 1:
            found["interconnect"].add(row.interconnect)
            found["engine_tp"].add(row.engine)
        if row.speculative:
            found["speculative"].add(row.hardware_class)
    return {key: tuple(sorted(values)) for key, values in found.items()}


def row_table(
    rows: Sequence[CalibrationRow],
    k: DecodeConstants,
    loo: Sequence[float],
    loco: Sequence[float],
) -> dict[str, dict[str, float]]:
    """Per row: measured, predicted and the errors the fit reports (percent, signed): in sample,
    leave-one-out, and leave-one-card-out."""
    return {
        row.id: {
            "measured": row.tok_s,
            "predicted": round(predict(row, k), 2),
            "error_pct": round(100 * (predict(row, k) / row.tok_s - 1), 1),
            "loo_error_pct": round(100 * (math.exp(-out) - 1), 1),
            "loco_error_pct": round(100 * (math.exp(-card_out) - 1), 1),
        }
        for row, out, card_out in zip(rows, loo, loco, strict=True)
    }


def _abs_pct(log_residual: float) -> float:
    return abs(math.exp(-log_residual) - 1)


def _abs_pct_median(residuals: Sequence[float]) -> float:
    return statistics.median(_abs_pct(r) for r in residuals)


def _quantile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low, high = math.floor(position), math.ceil(position)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def _at(k: DecodeConstants, names: list[str], point: Sequence[float]) -> DecodeConstants:
    return k.with_values({n: math.exp(p) for n, p in zip(names, point, strict=True)})


def _huber(r: float) -> float:
    return r * r / 2 if abs(r) <= HUBER_DELTA else HUBER_DELTA * (abs(r) - HUBER_DELTA / 2)


def _objective(
    rows: Sequence[CalibrationRow],
    k: DecodeConstants,
    names: list[str],
    point: Sequence[float],
    priors: Sequence[float],
) -> float:
    residuals = log_residuals(rows, _at(k, names, point))
    data = sum(row.weight * _huber(r) for row, r in zip(rows, residuals, strict=True))
    return data + PRIOR_WEIGHT * sum((p - q) ** 2 for p, q in zip(point, priors, strict=True))


def _step(
    rows: Sequence[CalibrationRow],
    k: DecodeConstants,
    names: list[str],
    point: list[float],
    priors: Sequence[float],
    damping: float,
) -> list[float]:
    """One damped Gauss-Newton step on the Huber-reweighted least squares."""
    residuals = log_residuals(rows, _at(k, names, point))
    weights = [
        row.weight * (1.0 if abs(r) <= HUBER_DELTA else HUBER_DELTA / abs(r))
        for row, r in zip(rows, residuals, strict=True)
    ]
    jacobian = _jacobian(rows, k, names, point, residuals)
    n = len(names)
    matrix = [[0.0] * n for _ in range(n)]
    gradient = [0.0] * n
    for i in range(n):
        for j in range(n):
            matrix[i][j] = sum(
                w * col_i * col_j
                for w, col_i, col_j in zip(weights, jacobian[i], jacobian[j], strict=True)
            )
        matrix[i][i] += 2 * PRIOR_WEIGHT + damping * (1 + matrix[i][i])
        gradient[i] = sum(
            w * c * r for w, c, r in zip(weights, jacobian[i], residuals, strict=True)
        )
        gradient[i] += 2 * PRIOR_WEIGHT * (point[i] - priors[i])
    return _solve(matrix, [-g for g in gradient])


def _jacobian(
    rows: Sequence[CalibrationRow],
    k: DecodeConstants,
    names: list[str],
    point: list[float],
    residuals: Sequence[float],
) -> list[list[float]]:
    """d residual / d log constant, by forward differences (one column per constant)."""
    h = 1e-5
    columns = []
    for index in range(len(names)):
        moved = list(point)
        moved[index] += h
        shifted = log_residuals(rows, _at(k, names, moved))
        columns.append([(a - b) / h for a, b in zip(shifted, residuals, strict=True)])
    return columns


def _solve(matrix: list[list[float]], rhs: list[float]) -> list[float]:
    """Gaussian elimination with partial pivoting: the systems here are 15 x 15."""
    n = len(rhs)
    a = [[*row, b] for row, b in zip(matrix, rhs, strict=True)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(a[r][col]))
        a[col], a[pivot] = a[pivot], a[col]
        for r in range(col + 1, n):
            factor = a[r][col] / a[col][col]
            for c in range(col, n + 1):
                a[r][c] -= factor * a[col][c]
    x = [0.0] * n
    for r in reversed(range(n)):
        x[r] = (a[r][n] - sum(a[r][c] * x[c] for c in range(r + 1, n))) / a[r][r]
    return x

"""A bench run as a calibration row: the measurement beside what the decode model was given.

`sparkrack bench` writes `<time>.calibration.yaml` next to its JSON; `sparkrack estimate
--calibration FILE...` refits the decode model with these rows beside the published ones, so the
estimate learns this rack (its engine build, its fabric, its kernels).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from sparkrack.ops.bench.measure import BenchResult

# A rack's own warm measurement counts for three published rows in its refit: it is the
# configuration being estimated, measured the way the estimate means it (single stream, warm).
RACK_ROW_WEIGHT = 3.0


def calibration_row(result: BenchResult) -> dict[str, Any] | None:
    """The run as a row of the calibration schema; None when it has no decode figure or inputs."""
    inputs, active = result.prediction.inputs, result.prediction.active_params
    measured = [s.decode_tok_s for s in result.single if s.decode_tok_s is not None]
    if inputs is None or active is None or not measured:
        return None
    settings = result.settings
    return {
        "id": f"rack-{settings.stack}-{result.started_utc}",
        "model": settings.model,
        "total_params": active,
        "active_params": active,
        "weight_bytes": round(inputs.active_weight_bytes),
        "moe_layers": inputs.moe,
        "kv_split_by_tp": inputs.kv_split_by_tp,
        "layers": inputs.layers,
        "hidden_size": inputs.hidden_size,
        "kv_bytes_per_token": inputs.kv_bytes_per_token,
        "state_bytes": inputs.state_bytes,
        "hardware": f"stack {settings.stack}",
        "hardware_class": inputs.hardware_class,
        "bandwidth_gb_s": inputs.bandwidth_gb_s,
        "engine": inputs.engine,
        "weight_format": inputs.weight_format,
        "tp": inputs.tp,
        "pp": inputs.pp,
        "interconnect": inputs.interconnect,
        "tp_nodes": inputs.tp_nodes,
        "context_tokens": settings.prompt_tokens + settings.max_tokens // 2,
        "speculative": inputs.speculative,
        "tok_s": round(result.decode().median, 2),
        "weight": RACK_ROW_WEIGHT,
        "source": f"sparkrack bench of stack {settings.stack} at {settings.endpoint}",
        "notes": f"median of {len(measured)} warm single-stream runs, started"
        f" {result.started_utc}; predicted {result.prediction.expected_tok_s:.1f} tok/s",
    }


def write_calibration(result: BenchResult, path: Path) -> Path | None:
    row = calibration_row(result)
    if row is None:
        return None
    path.write_text(yaml.safe_dump({"rows": [row]}, sort_keys=False, width=100))
    return path

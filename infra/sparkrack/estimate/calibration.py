"""Calibration rows: published (or your rack's own) decode figures, each with its configuration.

A row holds the model's numbers as published (parameters, checkpoint bytes, layers, KV bytes per
token) and the run's setup (hardware, engine, format, parallel layout, context, concurrency), so
that the decode model can predict it exactly as it predicts a stack. The shipped set is
`catalog/calibration/decode-figures.yaml`; `sparkrack bench` writes rows of the same form.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from sparkrack import catalog
from sparkrack.estimate.decode import DecodeConstants, DecodeInputs, Interconnect, decode_terms
from sparkrack.stackspec import StrictModel
from sparkrack.stackspec.base import ParamCount, Size

SHIPPED = "calibration/decode-figures.yaml"


class CalibrationRow(StrictModel):
    id: str
    model: str
    total_params: ParamCount
    active_params: ParamCount
    weight_bytes: Size = Field(description="the checkpoint, or the bytes read per token if given")
    layers: int = Field(gt=0)
    hidden_size: int = Field(gt=0)
    kv_bytes_per_token: float = Field(ge=0)
    attention: Literal["gqa", "mla", "hybrid"] = "gqa"
    experts: int | None = Field(default=None, gt=0)  # routed experts per layer, when published
    experts_per_token: int | None = Field(default=None, gt=0)
    # Rows written by `sparkrack bench` give what the planner computed: the active bytes as
    # weight_bytes (total = active), so they say MoE and the KV split outright.
    moe_layers: bool | None = None
    kv_split_by_tp: bool | None = None
    state_bytes: float = Field(default=0, ge=0)
    hardware: str
    # The GPU model (gb10, h100, h200, b200), for leave-one-card-out; None (a rack's own row):
    # its hardware class.
    card: str | None = None
    hardware_class: str
    bandwidth_gb_s: float = Field(gt=0)
    engine: str
    weight_format: str
    tp: int = Field(default=1, ge=1)
    pp: int = Field(default=1, ge=1)
    interconnect: Interconnect = "none"
    tp_nodes: int = Field(default=1, ge=1)
    context_tokens: int = Field(ge=0)
    concurrency: int = Field(default=1, ge=1)
    speculative: bool = False
    draft_tokens: int = Field(default=3, ge=1)  # MTP / EAGLE tokens proposed a step
    tok_s: float = Field(gt=0, description="measured per-request decode tok/s")
    weight: float = Field(default=1.0, ge=0, description="in the fit; flagged rows count less")
    flags: tuple[str, ...] = ()
    source: str
    quote: str = ""
    notes: str = ""

    @property
    def card_name(self) -> str:
        return self.card or self.hardware_class

    @property
    def moe(self) -> bool:
        if self.moe_layers is not None:
            return self.moe_layers
        return self.active_params < self.total_params

    def inputs(self) -> DecodeInputs:
        return DecodeInputs(
            hardware_class=self.hardware_class,
            bandwidth_gb_s=self.bandwidth_gb_s,
            engine=self.engine,
            weight_format=self.weight_format,
            moe=self.moe,
            active_weight_bytes=self.active_params * int(self.weight_bytes) / self.total_params,
            total_weight_bytes=int(self.weight_bytes),
            experts=self.experts,
            experts_per_token=self.experts_per_token,
            batch=self.concurrency,
            layers=self.layers,
            hidden_size=self.hidden_size,
            kv_bytes_per_token=self.kv_bytes_per_token,
            kv_split_by_tp=self.attention == "gqa"
            if self.kv_split_by_tp is None
            else self.kv_split_by_tp,
            state_bytes=self.state_bytes,
            context_tokens=self.context_tokens,
            tp=self.tp,
            pp=self.pp,
            interconnect=self.interconnect,
            tp_nodes=self.tp_nodes,
            speculative=self.speculative,
            draft_tokens=self.draft_tokens,
        )


def predict(row: CalibrationRow, k: DecodeConstants) -> float:
    """What the model says this row should have measured, per request at its concurrency."""
    return decode_terms(row.inputs(), k).tok_s


def shipped_rows() -> list[CalibrationRow]:
    return [CalibrationRow.model_validate(raw) for raw in catalog.data(SHIPPED)["rows"]]


def shipped_constants() -> DecodeConstants:
    return DecodeConstants.model_validate(catalog.data("decode_model.yaml"))

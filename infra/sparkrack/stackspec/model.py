"""The model as far as planning needs it: size, layers, attention, context."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    Field,
    field_validator,
    model_validator,
)

from sparkrack.stackspec.base import ParamCount, Size, StrictModel
from sparkrack.text.spectext import (
    CommitHash,
    HfRepo,
    ServedName,
    ShortName,
)

LayerKind = Literal["gqa", "mla", "linear"]


class AttentionSpec(StrictModel):
    """How a model attends, which decides what its KV cache costs.

    gqa: K and V per KV head per token. mla: one compressed latent (kv_lora_rank + rope_head_dim)
    per token. linear: a constant recurrent state per sequence. hybrid: `layer_kinds` counts each.
    """

    type: Literal["gqa", "mla", "linear", "hybrid"]
    heads: int = Field(gt=0)
    kv_heads: int | None = Field(default=None, gt=0)
    head_dim: int = Field(gt=0)
    kv_lora_rank: int | None = Field(default=None, gt=0)
    rope_head_dim: int | None = Field(default=None, ge=0)
    layer_kinds: dict[LayerKind, Annotated[int, Field(gt=0)]] = {}
    linear_heads: int | None = Field(default=None, gt=0)
    linear_head_dim: int | None = Field(default=None, gt=0)
    linear_state_bytes: float = Field(default=4.0, gt=0, description="fp32 recurrent state")

    def kinds(self, layers: int) -> dict[LayerKind, int]:
        return dict(self.layer_kinds) if self.type == "hybrid" else {self.type: layers}

    @model_validator(mode="after")
    def _fields_for_each_kind(self) -> AttentionSpec:
        kinds = set(self.layer_kinds) if self.type == "hybrid" else {self.type}
        if self.type == "hybrid" and len(self.layer_kinds) < 2:
            raise ValueError("a hybrid model needs layer_kinds with at least two kinds")
        if self.type != "hybrid" and self.layer_kinds:
            raise ValueError("layer_kinds is for type: hybrid")
        if "gqa" in kinds and self.kv_heads is None:
            raise ValueError("gqa attention needs kv_heads")
        if self.kv_heads is not None and self.heads % self.kv_heads:
            raise ValueError(f"kv_heads {self.kv_heads} does not divide heads {self.heads}")
        if "mla" in kinds and (self.kv_lora_rank is None or self.rope_head_dim is None):
            raise ValueError("mla attention needs kv_lora_rank and rope_head_dim")
        return self


PLACEHOLDER_OWNERS = ("PLACEHOLDER", "TODO", "TBD", "CHANGEME", "EXAMPLE")


class ModelSpec(StrictModel):
    # vLLM serves the model under this name unless serving.served_model_name says another
    name: ServedName
    total_params: ParamCount
    active_params: ParamCount | None = Field(default=None, description="MoE; default: dense")
    # A mixture of experts' routed experts per layer and how many each token takes: with several
    # streams in a batch, each step reads the union of the experts they route to (the decode
    # model's concurrency term). None: unknown, and the estimate says so.
    experts: int | None = Field(default=None, gt=0)
    experts_per_token: int | None = Field(default=None, gt=0)
    layers: int = Field(gt=0)
    hidden_size: int = Field(gt=0)
    attention: AttentionSpec
    weight_bytes: Size | None = Field(default=None, description="the checkpoint as shipped")
    bytes_per_param: float | None = Field(default=None, gt=0, le=4)
    quantization: ShortName
    # The weight format the decode model knows it by (catalog/decode_model.yaml `formats`:
    # bf16, fp8, int4, awq-4bit, nvfp4, mxfp4, ...); None: the quantization name.
    weight_format: ShortName | None = None
    kv_cache_bytes: float = Field(default=2.0, gt=0, description="per element at dtype auto")
    max_position_embeddings: int = Field(gt=0)
    # The Hugging Face repository and the commit vLLM loads: a real stack must name both (the
    # catalogue does where the publisher or a field report makes them known); a simulated one's
    # stand-in loads nothing.
    hf_repo: HfRepo | None = None
    revision: CommitHash | None = None
    hf_overrides: dict[str, Any] = {}

    @field_validator("hf_repo")
    @classmethod
    def _not_a_placeholder(cls, repo: str | None) -> str | None:
        if repo is not None and repo.split("/")[0].upper() in PLACEHOLDER_OWNERS:
            raise ValueError(f"{repo} is a placeholder, not a repository: name the real one")
        return repo

    @model_validator(mode="after")
    def _consistent(self) -> ModelSpec:
        if self.weight_bytes is None and self.bytes_per_param is None:
            raise ValueError("give weight_bytes or bytes_per_param")
        if self.active_params is not None and self.active_params > self.total_params:
            raise ValueError("active_params exceeds total_params")
        if (self.experts is None) != (self.experts_per_token is None):
            raise ValueError("give experts and experts_per_token together")
        if self.experts and self.experts_per_token and self.experts_per_token > self.experts:
            raise ValueError("experts_per_token exceeds experts")
        if self.attention.type == "hybrid" and sum(self.attention.layer_kinds.values()) != (
            self.layers
        ):
            raise ValueError(
                f"attention.layer_kinds sum to {sum(self.attention.layer_kinds.values())},"
                f" not the {self.layers} layers"
            )
        return self

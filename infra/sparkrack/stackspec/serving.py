"""Serving: the engine image, parallel sizes, memory, vLLM flags and staged weights."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import (
    BeforeValidator,
    ByteSize,
    Field,
    field_validator,
    model_validator,
)

from sparkrack.stackspec.base import Port, Size, StrictModel
from sparkrack.text.spectext import (
    EnvName,
    HttpUrl,
    ImageReference,
    NodePath,
    OneLine,
    PackageVersion,
    ServedName,
)


def _parallel_size(value: object) -> object:
    if value == "auto" or (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
        return value
    raise ValueError(f"must be a positive integer or 'auto', not {value!r}")


ParallelSize = Annotated[int | Literal["auto"], BeforeValidator(_parallel_size)]

# Flags the plan derives; setting them again in extra_args would fight the plan.
PLANNED_VLLM_FLAGS = {
    "--tensor-parallel-size": "serving.tensor_parallel_size",
    "--pipeline-parallel-size": "serving.pipeline_parallel_size",
    "--gpu-memory-utilization": "serving.gpu_memory_utilization",
    "--max-model-len": "serving.max_model_len",
    "--max-num-seqs": "serving.max_num_seqs",
    "--distributed-executor-backend": "the plan (ray across nodes)",
    "--hf-overrides": "model.hf_overrides",
    "--kv-cache-dtype": "serving.kv_cache_dtype",
    "--port": "serving.port",
    "--host": "the plan (the head's management address)",
    "--shutdown-timeout": "serving.drain_timeout_s",
}

KV_CACHE_DTYPE_BYTES: dict[str, float | None] = {
    "auto": None,  # the model's kv_cache_bytes
    "bfloat16": 2.0,
    "fp8": 1.0,
    "fp8_e4m3": 1.0,
    "fp8_e5m2": 1.0,
}


class WeightsSpec(StrictModel):
    """Where the head gets the checkpoint that sparkrack then ships to every node's model dir:
    `download` the model's Hugging Face repo (a token, if the repo needs one, is the Pulumi
    secret `sparkrack:hfToken`), or a `directory` already on the head. With pipeline parallelism
    each node gets only its stage's shards (`layer_aware`), over the fabric, node to node."""

    source: Literal["download", "directory"]
    directory: NodePath | None = Field(default=None, description="on the head")
    endpoint: HttpUrl = "https://huggingface.co"  # HF_ENDPOINT
    layer_aware: bool = True

    @model_validator(mode="after")
    def _directory_for_directory(self) -> WeightsSpec:
        if self.source == "directory" and self.directory is None:
            raise ValueError("source: directory needs `directory`, the checkpoint on the head")
        return self


# Tags that name a moving target: the image under them changes without the stack changing.
UNPINNED_TAGS = ("latest", "nightly", "main", "master", "dev", "edge")


def is_pinned(reference: str) -> bool:
    """A digest, or a tag that names one release (not latest, nightly, ...)."""
    if "@sha256:" in reference:
        return True
    last = reference.rsplit("/", 1)[-1]
    tag = last.partition(":")[2]
    return bool(tag) and tag not in UNPINNED_TAGS


class EngineBuildSpec(StrictModel):
    """`source: build`: the head builds the engine image FROM `base` (already on the head), adds
    Ray at `ray`, and refuses a base whose vLLM is not `vllm`."""

    base: ImageReference
    vllm: PackageVersion
    ray: PackageVersion


class EngineSpec(StrictModel):
    """Which engine image every node runs, by tag or digest, and where the head gets it: `build`
    it (see `build`), find it already `present` (pulled by the operator), or `control`: `podman
    save` on the machine running Pulumi. The other nodes get it from the head over the fabric.
    A real stack's image (and build base) must be pinned unless `accept_unpinned` says so."""

    name: Literal["vllm"] = "vllm"
    image: ImageReference
    source: Literal["build", "present", "control"] = "present"
    build: EngineBuildSpec | None = None
    accept_unpinned: bool = False

    @model_validator(mode="after")
    def _build_with_build(self) -> EngineSpec:
        if self.source == "build" and self.build is None:
            raise ValueError("source: build needs `build` (base, vllm, ray)")
        if self.source != "build" and self.build is not None:
            raise ValueError(f"`build` is for source: build, not {self.source}")
        return self


MOVED_TO_ENGINE = {"image": "serving.engine.image", "image_source": "serving.engine.source"}


class ServingSpec(StrictModel):
    engine: EngineSpec
    tensor_parallel_size: ParallelSize = "auto"
    pipeline_parallel_size: ParallelSize = "auto"
    gpu_memory_utilization: float = 0.80
    max_model_len: int | None = Field(default=None, gt=0, description="default: the model's")
    max_num_seqs: int | None = Field(default=None, gt=0, description="concurrency target")
    kv_cache_dtype: Literal["auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2"] = "auto"
    runtime_budget_factor: float = Field(default=1.18, ge=1, description="seed 002")
    runtime_reserve_per_gpu: Size = Field(
        default=ByteSize(2 * 2**30), description="activations, CUDA graphs, NCCL buffers"
    )
    shm_size: Size = Field(
        default=ByteSize(16 * 2**30), description="/dev/shm: Ray's object store, NCCL buffers"
    )
    # A directory on every node that already holds the weights (the HF cache layout), mounted as
    # it is; by default the inference role keeps one per node, retained by `pulumi destroy`.
    model_dir: NodePath | None = None
    # The checkpoint sparkrack distributes into the model dirs; None: the operator fills them.
    weights: WeightsSpec | None = None
    port: Port = 8000
    # How long a rollout lets the requests in flight finish before the engine restarts: vLLM's
    # --shutdown-timeout (vllm-project/vllm#36666: on SIGTERM it admits nothing new and waits up
    # to this long; vLLM 0.18.0 on, tests/unit/test_engine_release.py holds the pin to it). Seed
    # 001's agents ran 2,000-token answers at ~20 tok/s: about 100 s.
    drain_timeout_s: int = Field(default=120, ge=0, le=3600)
    # Ray workers that start together; the next batch starts once these have joined. None: all
    # at once. For hosts short of CPU: Ray gives a starting node fixed times (30 s to register,
    # agents included), which sixteen nodes starting together on two shared cores exceed.
    ray_join_batch: int | None = Field(default=None, ge=1)
    served_model_name: ServedName | None = None
    # Whether the API asks for a key: set by load from whether the Pulumi secret sparkrack:apiKey
    # is configured (the key itself never enters the spec), never written in the stack.
    api_key: bool = False
    extra_args: tuple[OneLine, ...] = ()
    env: dict[EnvName, OneLine] = {}

    @model_validator(mode="before")
    @classmethod
    def _moved_keys(cls, data: object) -> object:
        if isinstance(data, dict) and (moved := sorted(set(data) & set(MOVED_TO_ENGINE))):
            where = ", ".join(f"serving.{key} is now {MOVED_TO_ENGINE[key]}" for key in moved)
            raise ValueError(f"{where} (the engine is pinned in one place)")
        return data

    @field_validator("gpu_memory_utilization")
    @classmethod
    def _utilization_in_range(cls, value: float) -> float:
        if not 0 < value <= 1:
            raise ValueError(
                f"{value} is outside (0, 1]: it is the fraction of GPU-visible memory vLLM may"
                " claim (0.80 leaves room for the OS on GB10 unified memory)"
            )
        return value

    @field_validator("extra_args")
    @classmethod
    def _no_planned_flags(cls, args: tuple[str, ...]) -> tuple[str, ...]:
        for arg in args:
            flag = arg.split("=", 1)[0]
            if flag in PLANNED_VLLM_FLAGS:
                raise ValueError(f"{flag} is planned from {PLANNED_VLLM_FLAGS[flag]}; set it there")
        return args


# node-exporter collectors that hung scrapes under RDMA load in seed 001.

"""The engine: vLLM's arguments and each node's container environment."""

from __future__ import annotations

import json
from typing import Literal

from sparkrack.plan.fit import max_model_len
from sparkrack.plan.nccl import management_nic
from sparkrack.plan.parallel import ParallelLayout
from sparkrack.stackspec import ClusterSpec, EngineBuildSpec, NodeSpec, StrictModel, WeightsSpec

# The podman secret the API's key is created as (from stdin, never a file or a command line).
API_KEY_SECRET = "sparkrack-api-key"


class ServingPlan(StrictModel):
    engine: str
    image: str
    engine_build: EngineBuildSpec | None  # what the head builds the image from
    containerfile: str  # the build's Containerfile ("" unless the head builds the image)
    hardware_notes: tuple[str, ...]  # what the field reports say of the engine on this hardware
    model: str  # what vLLM loads: the Hugging Face repository (a simulated stack's model name)
    revision: str  # the commit it loads; "main" only on a simulated stack that names none
    served_model_name: str
    api_node: str  # the Ray head runs `vllm serve`
    address: str  # where the API listens: the head's management address
    port: int
    # The Podman secret of the service user vLLM reads its key from (VLLM_API_KEY, 0.27.1's
    # envs.py); None: the API asks for no key (the stack sets no sparkrack:apiKey)
    api_key_secret: str | None
    drain_timeout_s: int  # vLLM's --shutdown-timeout: requests in flight finish before a restart
    vllm_args: tuple[str, ...]
    image_source: Literal["build", "present", "control"]
    shm_bytes: int
    model_dir: str | None  # a directory every node already has; None: the role keeps one
    weights: WeightsSpec | None  # the checkpoint the role ships into the model dirs
    # The workers in the waves they start Ray in, each once the last has joined (ray_join_batch)
    ray_join_waves: tuple[tuple[str, ...], ...]


def plan_serving(spec: ClusterSpec, layout: ParallelLayout) -> ServingPlan:
    serving, model = spec.serving, spec.model
    address = spec.node(layout.head_node).address  # the API on the management address only
    repo = model.hf_repo or model.name
    args = [
        repo,
        *(("--revision", model.revision) if model.revision else ()),
        *("--served-model-name", serving.served_model_name or model.name),
        *("--host", address),
        *("--port", str(serving.port)),
        *("--tensor-parallel-size", str(layout.tensor_parallel_size)),
        *("--pipeline-parallel-size", str(layout.pipeline_parallel_size)),
        *("--gpu-memory-utilization", f"{serving.gpu_memory_utilization:g}"),
        *("--max-model-len", str(max_model_len(spec))),
        *("--shutdown-timeout", str(serving.drain_timeout_s)),
    ]
    if len(spec.nodes) > 1:
        args += ["--distributed-executor-backend", "ray"]
    if serving.max_num_seqs:
        args += ["--max-num-seqs", str(serving.max_num_seqs)]
    if serving.kv_cache_dtype != "auto":
        args += ["--kv-cache-dtype", serving.kv_cache_dtype]
    if model.hf_overrides:
        # e.g. a text-only checkpoint of a multimodal architecture (seed 001)
        args += ["--hf-overrides", json.dumps(model.hf_overrides, separators=(",", ":"))]
    return ServingPlan(
        engine=serving.engine.name,
        image=serving.engine.image,
        engine_build=serving.engine.build,
        containerfile=containerfile(serving.engine.build),
        hardware_notes=hardware_notes(spec),
        model=repo,
        revision=model.revision or "main",
        served_model_name=serving.served_model_name or model.name,
        api_node=layout.head_node,
        address=address,
        port=serving.port,
        api_key_secret=API_KEY_SECRET if serving.api_key else None,
        drain_timeout_s=serving.drain_timeout_s,
        vllm_args=(*args, *serving.extra_args),
        image_source=serving.engine.source,
        shm_bytes=int(serving.shm_size),
        model_dir=serving.model_dir,
        weights=serving.weights,
        ray_join_waves=join_waves(
            [node.name for node in spec.nodes if node.name != layout.head_node],
            serving.ray_join_batch,
        ),
    )


def hardware_notes(spec: ClusterSpec) -> tuple[str, ...]:
    """What the hardware profiles' field reports say of the engine, for `sparkrack plan`."""
    notes: list[str] = []
    asked = spec.serving.gpu_memory_utilization
    for name in sorted({node.hardware for node in spec.nodes}):
        engine = spec.hardware_profiles[name].engine
        tested = engine.tested_gpu_memory_utilization
        if tested is not None and asked > tested:
            notes.append(
                f"{name}: gpu_memory_utilization {asked:g} is above the {tested:g} the field"
                " report ran stably (unified memory: the OS and Ray share the rest)"
            )
        notes += [f"{name}: {note}" for note in engine.notes]
    return tuple(dict.fromkeys(notes))


def containerfile(build: EngineBuildSpec | None) -> str:
    """The engine image the head builds: the stack's vLLM base, checked, with Ray added (the vLLM
    image lacks it, seed 001), both at the versions the stack names."""
    if build is None:
        return ""
    check = (
        "import sys, vllm; v = vllm.__version__.split('+')[0]; "
        f"sys.exit(None if v == '{build.vllm}' else"
        f" f'{build.base} carries vLLM {{v}}, the stack says {build.vllm}')"
    )
    return "\n".join(
        [
            "# Built on the head by sparkrack from the stack's serving.engine.build.",
            f"FROM {build.base}",
            f"RUN python3 -c {json.dumps(check)}",
            f'RUN pip install --no-cache-dir "ray[default]=={build.ray}"',
            "",
        ]
    )


def join_waves(workers: list[str], batch: int | None) -> tuple[tuple[str, ...], ...]:
    """The workers in order, `batch` to a wave (all in one without a batch size)."""
    size = batch or max(len(workers), 1)
    return tuple(tuple(workers[i : i + size]) for i in range(0, len(workers), size))


def engine_env(
    spec: ClusterSpec, node: NodeSpec, layout: ParallelLayout, nccl: dict[str, str]
) -> dict[str, str]:
    """The container env: NCCL, the bootstrap addresses, the layer split, then the user's own."""
    env = dict(nccl)
    env["GLOO_SOCKET_IFNAME"] = management_nic(spec, node)
    env["VLLM_HOST_IP"] = node.address
    if layout.vllm_pp_layer_partition:
        env["VLLM_PP_LAYER_PARTITION"] = layout.vllm_pp_layer_partition
    if spec.serving.weights is not None:
        env |= HUB_OFFLINE
    return env | spec.serving.env


# Staged weights are served from the node's copy: with the Hub reachable, vLLM would resolve the
# revision online and fetch the model again on every node, past the layer-aware staging.
HUB_OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}

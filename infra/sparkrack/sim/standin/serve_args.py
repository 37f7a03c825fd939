"""The stand-in's command line: `vllm serve MODEL` flags as vLLM reads them, the refusal it
raises and the log line shape it prints. Standard library only (it runs in the stand-in image)."""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

BANNER = (
    "sparkrack engine stand-in: this is NOT vLLM. It replaces vLLM's GPU work in sparkrack's "
    "simulated cluster with filler tokens; Ray is real. Real stacks deploy the real vLLM image."
)


class StandinError(Exception):
    """A condition under which the stand-in refuses to serve; the text says what real vLLM or
    NCCL would have done."""


def log(level: str, message: str) -> None:
    # vLLM's own log shape, `INFO 12-02 10:00:00 [file] message`, with the stand-in as the file.
    print(f"{level} {time.strftime('%m-%d %H:%M:%S')} [standin] {message}", flush=True)


# --- command line ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ServeArgs:
    model: str
    host: str | None
    port: int
    served_model_name: tuple[str, ...]
    tensor_parallel_size: int
    pipeline_parallel_size: int
    distributed_executor_backend: str | None
    gpu_memory_utilization: float
    max_model_len: int | None
    max_num_seqs: int
    hf_overrides: dict[str, Any]
    trust_remote_code: bool
    shutdown_timeout: int
    token_rate: float

    @property
    def world_size(self) -> int:
        return self.tensor_parallel_size * self.pipeline_parallel_size

    @property
    def model_name(self) -> str:
        """The name requests use and metrics carry: the first served name, as in vLLM."""
        return self.served_model_name[0] if self.served_model_name else self.model


def positive_int(value: str) -> int:
    number = int(value)
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {number}")
    return number


def non_negative_int(value: str) -> int:
    number = int(value)
    if number < 0:
        raise argparse.ArgumentTypeError(f"must be at least 0, got {number}")
    return number


def positive_float(value: str) -> float:
    number = float(value)
    if not number > 0:
        raise argparse.ArgumentTypeError(f"must be greater than 0, got {value}")
    return number


def memory_fraction(value: str) -> float:
    number = float(value)
    if not 0 < number <= 1:
        raise argparse.ArgumentTypeError(f"must be within (0, 1], got {value}")
    return number


def json_object(value: str) -> dict[str, Any]:
    # Worded like vLLM's own JSON-argument parser.
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError as err:
        raise argparse.ArgumentTypeError(f"Failed to parse '{value}' as JSON: {err}") from err
    if not isinstance(parsed, dict):
        raise argparse.ArgumentTypeError(f"Failed to parse '{value}': expected a JSON object")
    return parsed


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vllm", description=BANNER)
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="serve MODEL over the OpenAI API (stand-in)")
    serve.add_argument("model")
    serve.add_argument("--host", default=None)
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--served-model-name", nargs="+", default=[])
    serve.add_argument("--tensor-parallel-size", "-tp", type=positive_int, default=1)
    serve.add_argument("--pipeline-parallel-size", "-pp", type=positive_int, default=1)
    serve.add_argument(
        "--distributed-executor-backend", choices=["ray", "mp", "uni", "external_launcher"]
    )
    serve.add_argument("--gpu-memory-utilization", type=memory_fraction, default=0.9)
    serve.add_argument("--max-model-len", type=positive_int, default=None)
    serve.add_argument("--max-num-seqs", type=positive_int, default=256)
    serve.add_argument("--hf-overrides", type=json_object, default={})
    serve.add_argument("--trust-remote-code", action="store_true")
    # vLLM's (vllm-project/vllm#36666): on SIGTERM admit nothing new, let the requests in flight
    # finish for up to this many seconds; 0 aborts them at once.
    serve.add_argument("--shutdown-timeout", type=non_negative_int, default=0)
    serve.add_argument(
        "--token-rate",
        type=positive_float,
        default=40.0,
        help="stand-in only: generated tokens per second per stream",
    )
    return parser


def parse_args(argv: Sequence[str]) -> ServeArgs:
    """`vllm serve MODEL [flags]`; unknown flags exit 2 with argparse's message, as vLLM does."""
    parsed = build_parser().parse_args(list(argv))
    backend = parsed.distributed_executor_backend
    if backend not in (None, "ray"):
        # Not a vLLM error: the stand-in has nothing to simulate for the other backends.
        raise StandinError(f"--distributed-executor-backend {backend}: the stand-in runs only ray")
    # Every ServeArgs field is the argparse destination of the same name.
    values = {f.name: getattr(parsed, f.name) for f in fields(ServeArgs)}
    return ServeArgs(**{**values, "served_model_name": tuple(parsed.served_model_name)})


def pp_layer_partition(value: str | None, pp_size: int, num_hidden_layers: int | None) -> list[int]:
    """VLLM_PP_LAYER_PARTITION checked as vLLM's `get_pp_indices` checks it, same error texts.

    With no model to load, the layer count is known only from `--hf-overrides
    '{"num_hidden_layers": N}'`; without it the sum cannot be checked."""
    if value is None:
        return []
    try:
        partitions = [int(layer) for layer in value.split(",")]
    except ValueError as err:
        raise StandinError(f"Invalid partition string: {value}") from err
    if len(partitions) != pp_size:
        raise StandinError(f"{len(partitions)=} does not match {pp_size=}.")
    if num_hidden_layers is not None and sum(partitions) != num_hidden_layers:
        raise StandinError(f"{sum(partitions)=} does not match {num_hidden_layers=}.")
    return partitions

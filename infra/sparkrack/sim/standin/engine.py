"""sparkrack's engine stand-in: NOT vLLM, a test double for its GPU work in the simulated cluster.

It takes `vllm serve MODEL` flags, refuses to start in a container given no GPU (cuda.py), joins
the Ray cluster that `ray start` formed (Ray is real), reserves one GPU bundle per rank as vLLM
does, stops when a rank's container has no GPU, has an actor on each rank's node report the NCCL
transport that node's env, RDMA devices, device nodes and memlock limit would give (nccl.py):
TCP sockets when RDMA is unusable, said only in the log, as real NCCL does. Then it serves the
OpenAI API with filler tokens at `--token-rate` per stream, exposes vllm:* metrics under their
real names, and stops when a rank dies, as vLLM's engine does.

Runs inside the stand-in image as a script (standard library + Ray); Ray is imported only where
the driver needs it, so the pure parts import and unit-test on a host without Ray.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass, field, fields
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

BANNER = (
    "sparkrack engine stand-in: this is NOT vLLM. It replaces vLLM's GPU work in sparkrack's "
    "simulated cluster with filler tokens; Ray is real. Real stacks deploy the real vLLM image."
)
STANDIN_VERSION = "0.0.0+sparkrack.standin"
# vLLM waits up to 1800 s for a placement group; a simulated cluster is up in well under 300.
PLACEMENT_TIMEOUT_S = 300.0
PLACEMENT_LOG_EVERY_S = 10.0
# Filler that says what it is, for anyone reading a "completion" from the simulated cluster.
FILLER = ("this", "is", "sparkrack's", "engine", "stand-in,", "not", "a", "model;", "filler")
DEFAULT_MAX_TOKENS = 16  # the OpenAI completions default; the stand-in uses it for chat too
DEFAULT_MAX_MODEL_LEN = 8192  # stands in for the model config's max positions


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


if __package__:  # imported: the tests, and sparkrack on the host
    from sparkrack.sim.standin.cuda import no_gpu_refusal
    from sparkrack.sim.standin.nccl import (
        SYSFS_INFINIBAND,
        NodeReport,
        inspect_node,
        ipv4_interfaces,
        memlock_limit,
    )
else:  # run as a script in the stand-in image, where cuda.py and nccl.py lie beside it
    from cuda import no_gpu_refusal  # type: ignore[import-not-found,no-redef]
    from nccl import (  # type: ignore[import-not-found,no-redef]
        SYSFS_INFINIBAND,
        NodeReport,
        inspect_node,
        ipv4_interfaces,
        memlock_limit,
    )


class NodeInspector:
    """One per placement-group bundle: holds that GPU, as a vLLM worker does, and reports."""

    def __init__(self, rank: int) -> None:
        self.rank = rank

    def report(self) -> NodeReport:
        import ray

        gpus = ray.get_gpu_ids()
        address = ray.util.get_node_ip_address()
        device = int(gpus[0]) if gpus else 0
        interfaces = ipv4_interfaces()
        return inspect_node(
            self.rank,
            address,
            device,
            os.environ,
            SYSFS_INFINIBAND,
            interfaces,
            memlock=memlock_limit(),
        )

    def gpu_refusal(self) -> str | None:
        """What CUDA says in this rank's container when it was given no GPU; None when it was."""
        return no_gpu_refusal()

    def alive(self) -> int:
        return self.rank


# --- the Ray driver -------------------------------------------------------------------------


def reserve_gpus(args: ServeArgs) -> list[Any]:
    """Join the Ray cluster, take one GPU bundle per rank, start an inspector on each and log
    what they report. Returns the actor handles: they must live as long as the server."""
    import ray

    # Ray's advice about a future default concerns zero-GPU tasks; the stand-in has none.
    warnings.filterwarnings("ignore", category=FutureWarning, module="ray")
    ray.init(address="auto", logging_level=logging.WARNING)
    group = wait_for_placement_group(args.world_size)
    actors = start_inspectors(group, args.world_size)
    reports = ray.get([actor.report.remote() for actor in actors])
    for report in reports:
        for line in report.log_lines():
            print(line, flush=True)
    no_gpu = ray.get([actor.gpu_refusal.remote() for actor in actors])
    refusals = gpu_refusals_of(reports, no_gpu) + refusals_of(reports, args.world_size)
    if refusals:
        raise StandinError("\n".join(refusals))
    return actors


# vLLM's engine dies with any of its ranks; the stand-in asks its ranks this often.
RANK_CHECK_EVERY_S = 10.0
RANK_ANSWER_TIMEOUT_S = 60.0  # a slow answer (a loaded node) is not a death


def watch_ranks(actors: list[Any]) -> None:
    """vLLM's engine dies with any of its ranks (EngineDeadError) and its API server exits; the
    unit's restart policy then starts a whole engine, which waits for every rank again and
    re-reads the transport. The stand-in does the same when a rank's actor is gone (its node's
    Ray stopped, its container replaced)."""
    import ray
    from ray.exceptions import GetTimeoutError, RayError

    transient = getattr(ray.exceptions, "ActorUnavailableError", GetTimeoutError)
    while True:
        time.sleep(RANK_CHECK_EVERY_S)
        try:
            ray.get([actor.alive.remote() for actor in actors], timeout=RANK_ANSWER_TIMEOUT_S)
        except (GetTimeoutError, transient):
            continue
        except RayError as error:
            first = (str(error).strip().splitlines() or [type(error).__name__])[0]
            log("ERROR", f"a rank of the engine died ({first}): the engine stops, as vLLM's does")
            os._exit(1)  # no Ray shutdown: its GCS calls may hang on the dead rank


def gpu_refusals_of(reports: Sequence[NodeReport], no_gpu: Sequence[str | None]) -> list[str]:
    """A rank whose container has no GPU stops the engine, as vLLM's worker does at CUDA init."""
    return [
        f"rank {r.rank} ({r.host}): {refusal}"
        for r, refusal in zip(reports, no_gpu, strict=True)
        if refusal
    ]


def refusals_of(reports: Sequence[NodeReport], world_size: int) -> list[str]:
    """Every rank's refusal, except a lone GPU on a machine without RDMA devices: vLLM sets up no
    NCCL network for a world of one, so there is no transport to get wrong."""
    return [
        f"rank {r.rank} ({r.host}): {r.transport.refusal}"
        for r in reports
        if r.transport.refusal and (world_size > 1 or r.ports)
    ]


def wait_for_placement_group(world_size: int) -> Any:
    """vLLM's layout: one {"GPU": 1} bundle per rank, strategy PACK, the first bundle pinned to
    the driver's node. With one GPU per GB10, PACK still puts each rank on its own node."""
    import ray
    from ray.util.placement_group import placement_group

    driver_node = f"node:{ray.util.get_node_ip_address()}"
    bundles: list[dict[str, float]] = [{"GPU": 1.0} for _ in range(world_size)]
    bundles[0][driver_node] = 0.001
    available = ray.cluster_resources().get("GPU", 0)
    if world_size > available:
        needs = f"{world_size} GPUs needed (TP x PP), the Ray cluster has {available:g}"
        log("WARNING", f"{needs}: waiting for nodes to join")
    group = placement_group(bundles, strategy="PACK")
    started = time.monotonic()
    while not ray.wait([group.ready()], timeout=PLACEMENT_LOG_EVERY_S)[0]:
        waited = time.monotonic() - started
        available = ray.cluster_resources().get("GPU", 0)
        if waited >= PLACEMENT_TIMEOUT_S:
            raise StandinError(
                f"Cannot provide a placement group of {world_size} GPU bundles within "
                f"{waited:.0f} seconds: {world_size} GPUs needed (tensor x pipeline parallel), "
                f"the Ray cluster has {available:g}. See `ray status` and `ray list nodes`, and "
                "check that the driver's address is the one the Ray head was started with."
            )
        log("INFO", f"waited {waited:.0f}s for {world_size} GPU bundles; Ray has {available:g}")
    return group


def start_inspectors(group: Any, world_size: int) -> list[Any]:
    import ray
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    inspector = ray.remote(NodeInspector)
    actors = []
    for rank in range(world_size):
        strategy = PlacementGroupSchedulingStrategy(
            placement_group=group, placement_group_bundle_index=rank
        )
        options = {"num_gpus": 1, "num_cpus": 0, "scheduling_strategy": strategy}
        actors.append(inspector.options(**options).remote(rank))
    return actors


# --- metrics --------------------------------------------------------------------------------

# vLLM's bucket boundaries (V1 engine).
# fmt: off
TTFT_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)
ITL_BUCKETS = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
    40.0, 80.0,
)
E2E_BUCKETS = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
    240.0, 480.0, 960.0, 1920.0, 7680.0,
)
# fmt: on


# vLLM's help texts.
METRIC_HELP = {
    "vllm:num_requests_running": "Number of requests in model execution batches.",
    "vllm:num_requests_waiting": "Number of requests waiting to be processed.",
    "vllm:kv_cache_usage_perc": "KV-cache usage. 1 means 100 percent usage.",
    "vllm:prompt_tokens_total": "Number of prefill tokens processed.",
    "vllm:generation_tokens_total": "Number of generation tokens processed.",
    "vllm:time_to_first_token_seconds": "Histogram of time to first token in seconds.",
    "vllm:inter_token_latency_seconds": "Histogram of inter-token latency in seconds.",
    "vllm:e2e_request_latency_seconds": "Histogram of e2e request latency in seconds.",
}


@dataclass
class Histogram:
    buckets: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    count: int = 0

    def observe(self, value: float) -> None:
        if not self.counts:
            self.counts = [0] * len(self.buckets)
        for i, bound in enumerate(self.buckets):
            if value <= bound:
                self.counts[i] += 1
        self.total += value
        self.count += 1

    def samples(self, name: str, labels: str) -> list[str]:
        counts = self.counts or [0] * len(self.buckets)
        lines = [
            f'{name}_bucket{{{labels},le="{b!r}"}} {float(c)!r}'
            for b, c in zip(self.buckets, counts, strict=True)
        ]
        lines.append(f'{name}_bucket{{{labels},le="+Inf"}} {float(self.count)!r}')
        lines.append(f"{name}_sum{{{labels}}} {self.total!r}")
        lines.append(f"{name}_count{{{labels}}} {float(self.count)!r}")
        return lines


class Metrics:
    """vLLM's metric names and label, kept by hand (no prometheus_client in the image)."""

    def __init__(self, model_name: str, kv_capacity_tokens: int) -> None:
        self.lock = threading.Lock()
        self.labels = f'model_name="{escape_label(model_name)}"'
        self.kv_capacity_tokens = kv_capacity_tokens
        self.running = 0
        self.waiting = 0
        self.kv_tokens = 0  # prompt + generated tokens of the running requests
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.ttft = Histogram(TTFT_BUCKETS)
        self.itl = Histogram(ITL_BUCKETS)
        self.e2e = Histogram(E2E_BUCKETS)

    def request_arrived(self) -> None:
        with self.lock:
            self.waiting += 1

    def request_started(self, prompt_tokens: int) -> None:
        with self.lock:
            self.waiting -= 1
            self.running += 1
            self.prompt_tokens += prompt_tokens
            self.kv_tokens += prompt_tokens

    def token_emitted(self, latency: float, first: bool) -> None:
        with self.lock:
            (self.ttft if first else self.itl).observe(latency)
            self.generation_tokens += 1
            self.kv_tokens += 1

    def request_finished(self, tokens: int, latency: float) -> None:
        with self.lock:
            self.running -= 1
            self.kv_tokens -= tokens
            self.e2e.observe(latency)

    def kv_cache_usage(self) -> float:
        """A plausible stand-in: the running requests' tokens over a cache of max-model-len."""
        return min(1.0, self.kv_tokens / self.kv_capacity_tokens)

    def render(self) -> str:
        """The Prometheus text exposition (format 0.0.4), as prometheus_client writes it."""
        with self.lock:
            scalars = [
                ("vllm:num_requests_running", "gauge", self.running),
                ("vllm:num_requests_waiting", "gauge", self.waiting),
                ("vllm:kv_cache_usage_perc", "gauge", self.kv_cache_usage()),
                ("vllm:prompt_tokens_total", "counter", self.prompt_tokens),
                ("vllm:generation_tokens_total", "counter", self.generation_tokens),
            ]
            lines = []
            for name, kind, value in scalars:
                lines += [*family_header(name, kind), f"{name}{{{self.labels}}} {float(value)!r}"]
            for name, histogram in (
                ("vllm:time_to_first_token_seconds", self.ttft),
                ("vllm:inter_token_latency_seconds", self.itl),
                ("vllm:e2e_request_latency_seconds", self.e2e),
            ):
                lines += [*family_header(name, "histogram"), *histogram.samples(name, self.labels)]
        return "\n".join(lines) + "\n"


def family_header(name: str, kind: str) -> list[str]:
    return [f"# HELP {name} {METRIC_HELP[name]}", f"# TYPE {name} {kind}"]


def escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


# --- token generation -----------------------------------------------------------------------


def token_due(started: float, rate: float, index: int) -> float:
    """When token `index` (from 0) is due: one token interval after the previous one, on a fixed
    schedule from the start so that sleep overshoot does not accumulate."""
    return started + (index + 1) / rate


def filler_token(index: int) -> str:
    word = FILLER[index % len(FILLER)]
    return word if index == 0 else f" {word}"


def count_prompt_tokens(text: str) -> int:
    """The stand-in has no tokenizer: a prompt token is a whitespace-separated word."""
    return len(text.split())


class Engine:
    """Concurrent streams, each paced independently at `rate`; at most `max_num_seqs` run, the
    rest wait, as in vLLM's scheduler. The first token comes one interval after admission (the
    stand-in has no prefill cost)."""

    def __init__(
        self,
        rate: float,
        max_num_seqs: int,
        metrics: Metrics,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.rate = rate
        self.slots = threading.BoundedSemaphore(max_num_seqs)
        self.metrics = metrics
        self.clock = clock
        self.sleep = sleep

    def generate(self, prompt_tokens: int, max_tokens: int) -> Generator[str, None, None]:
        arrived = self.clock()
        self.metrics.request_arrived()
        self.slots.acquire()
        self.metrics.request_started(prompt_tokens)
        emitted = 0
        try:
            started = previous = self.clock()
            for index in range(max_tokens):
                self.sleep(max(0.0, token_due(started, self.rate, index) - self.clock()))
                now = self.clock()
                # The first token's latency counts from arrival: queueing is part of TTFT.
                self.metrics.token_emitted(now - (arrived if index == 0 else previous), index == 0)
                previous, emitted = now, emitted + 1
                yield filler_token(index)
        finally:
            self.slots.release()
            self.metrics.request_finished(prompt_tokens + emitted, self.clock() - arrived)


# --- OpenAI API -----------------------------------------------------------------------------


class BadRequest(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Reply:
    """The OpenAI object shapes for one request, completions or chat."""

    chat: bool
    model: str
    id: str = field(default_factory=lambda: uuid.uuid4().hex)
    created: int = field(default_factory=lambda: int(time.time()))

    def envelope(self, stream: bool) -> dict[str, Any]:
        if self.chat:
            kind, prefix = ("chat.completion.chunk" if stream else "chat.completion"), "chatcmpl"
        else:
            kind, prefix = "text_completion", "cmpl"
        return {
            "id": f"{prefix}-{self.id}",
            "object": kind,
            "created": self.created,
            "model": self.model,
        }

    def chunk(self, text: str | None, finish_reason: str | None = None) -> dict[str, Any]:
        """One streamed piece; for chat, `text=None` opens the message with the role."""
        if self.chat:
            delta = {"role": "assistant", "content": ""} if text is None else {"content": text}
            choice: dict[str, Any] = {"index": 0, "delta": delta, "logprobs": None}
        else:
            choice = {"index": 0, "text": text or "", "logprobs": None}
        choice["finish_reason"] = finish_reason
        return {**self.envelope(stream=True), "choices": [choice]}

    def usage_chunk(self, usage: dict[str, int]) -> dict[str, Any]:
        return {**self.envelope(stream=True), "choices": [], "usage": usage}

    def whole(self, text: str, usage: dict[str, int]) -> dict[str, Any]:
        if self.chat:
            choice: dict[str, Any] = {"index": 0, "message": {"role": "assistant", "content": text}}
        else:
            choice = {"index": 0, "text": text}
        choice.update(logprobs=None, finish_reason="length")
        return {**self.envelope(stream=False), "choices": [choice], "usage": usage}


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    total = prompt_tokens + completion_tokens
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": total,
    }


def sse_event(payload: dict[str, Any] | str) -> bytes:
    """A server-sent event as vLLM writes it: compact JSON (or `[DONE]`) after `data: `."""
    data = payload if isinstance(payload, str) else json.dumps(payload, separators=(",", ":"))
    return f"data: {data}\n\n".encode()


def stream_events(
    reply: Reply, tokens: Iterator[str], prompt_tokens: int, include_usage: bool
) -> Iterator[bytes]:
    if reply.chat:
        yield sse_event(reply.chunk(None))
    pending, emitted = next(tokens, None), 0
    while pending is not None:
        following = next(tokens, None)
        emitted += 1
        # vLLM puts the finish reason on the chunk that carries the last token.
        yield sse_event(reply.chunk(pending, None if following is not None else "length"))
        pending = following
    if include_usage:
        yield sse_event(reply.usage_chunk(usage(prompt_tokens, emitted)))
    yield sse_event("[DONE]")


def prompt_text(body: dict[str, Any], chat: bool) -> str:
    if not chat:
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1:
            prompt = prompt[0]
        if not isinstance(prompt, str):
            raise BadRequest(400, "the stand-in takes one prompt string")
        return prompt
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest(400, "messages: a non-empty list is required")
    return " ".join(message_text(m) for m in messages)


def message_text(message: Any) -> str:
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, list):  # content parts: only the text ones count
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else ""


def max_tokens_of(body: dict[str, Any]) -> int:
    value = body.get("max_completion_tokens", body.get("max_tokens", DEFAULT_MAX_TOKENS))
    if not isinstance(value, int) or value < 1:
        raise BadRequest(400, f"max_tokens must be at least 1, got {value}.")
    return value


class StandinServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], args: ServeArgs) -> None:
        super().__init__(address, Handler)
        self.args = args
        self.metrics = Metrics(args.model_name, args.max_model_len or DEFAULT_MAX_MODEL_LEN)
        self.engine = Engine(args.token_rate, args.max_num_seqs, self.metrics)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: StandinServer

    def do_GET(self) -> None:
        if self.path == "/health":
            self.send_body(200, b"", "application/json")
        elif self.path == "/v1/models":
            self.send_json(200, self.models())
        elif self.path == "/metrics":
            text = self.server.metrics.render().encode()
            self.send_body(200, text, "text/plain; version=0.0.4; charset=utf-8")
        else:
            self.send_error_json(BadRequest(404, f"Not Found: {self.path}"))

    def do_POST(self) -> None:
        routes = {"/v1/completions": False, "/v1/chat/completions": True}
        try:
            if self.path not in routes:
                raise BadRequest(404, f"Not Found: {self.path}")
            self.complete(self.read_json(), chat=routes[self.path])
        except BadRequest as error:
            self.send_error_json(error)

    def models(self) -> dict[str, Any]:
        args = self.server.args
        names = args.served_model_name or (args.model,)
        limit = args.max_model_len or DEFAULT_MAX_MODEL_LEN
        data = [
            {
                "id": n,
                "object": "model",
                "owned_by": "vllm",
                "root": args.model,
                "max_model_len": limit,
            }
            for n in names
        ]
        return {"object": "list", "data": data}

    def read_json(self) -> dict[str, Any]:
        length = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"null")
        except json.JSONDecodeError as err:
            raise BadRequest(400, f"invalid JSON body: {err}") from err
        if not isinstance(body, dict):
            raise BadRequest(400, "the body must be a JSON object")
        return body

    def complete(self, body: dict[str, Any], chat: bool) -> None:
        names = self.server.args.served_model_name or (self.server.args.model,)
        model = body.get("model", names[0])
        if model not in names:
            raise BadRequest(404, f"The model `{model}` does not exist.")
        prompt_tokens = count_prompt_tokens(prompt_text(body, chat))
        max_tokens = max_tokens_of(body)
        reply = Reply(chat=chat, model=model)
        tokens = self.server.engine.generate(prompt_tokens, max_tokens)
        try:
            if body.get("stream"):
                include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
                self.send_stream(stream_events(reply, tokens, prompt_tokens, include_usage))
            else:
                text = "".join(tokens)
                self.send_json(200, reply.whole(text, usage(prompt_tokens, max_tokens)))
        finally:
            tokens.close()  # a client that left frees its slot now, not at garbage collection

    def send_stream(self, events: Iterator[bytes]) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            for event in events:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client left mid-stream

    def send_json(self, status: int, payload: dict[str, Any]) -> None:
        self.send_body(status, json.dumps(payload).encode(), "application/json")

    def send_error_json(self, error: BadRequest) -> None:
        kind = "NotFoundError" if error.status == 404 else "BadRequestError"
        payload = {
            "object": "error",
            "message": str(error),
            "type": kind,
            "param": None,
            "code": error.status,
        }
        self.send_json(error.status, payload)

    def send_body(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        log("INFO", f"{self.client_address[0]}:{self.client_address[1]} - {format % args}")


# --- entry point ----------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = parse_args(sys.argv[1:] if argv is None else argv)
        log("INFO", BANNER)
        # vLLM's own first line, which sparkrack's RDMA collector starts a new verdict on
        log("INFO", f"vLLM API server version {STANDIN_VERSION} (the stand-in's)")
        log("INFO", f"model {args.model}: {layout(args)}")
        check_layer_partition(args, os.environ.get("VLLM_PP_LAYER_PARTITION"))
        refusal = no_gpu_refusal()  # the API server's own platform check, before any rank
        if refusal:
            raise StandinError(refusal)
        actors = reserve_gpus(args)
    except StandinError as error:
        log("ERROR", f"sparkrack engine stand-in refuses to start: {error}")
        return 1
    serve(args, actors)
    return 0


def layout(args: ServeArgs) -> str:
    tp, pp = args.tensor_parallel_size, args.pipeline_parallel_size
    return f"TP {tp} x PP {pp} = {args.world_size} GPUs, {args.token_rate:g} tok/s per stream"


def check_layer_partition(args: ServeArgs, partition: str | None) -> None:
    layers = args.hf_overrides.get("num_hidden_layers")
    known = layers if isinstance(layers, int) else None
    stages = pp_layer_partition(partition, args.pipeline_parallel_size, known)
    if stages:
        log("INFO", f"VLLM_PP_LAYER_PARTITION: layers per stage {stages}")


def serve(args: ServeArgs, actors: list[Any]) -> None:
    # As PID 1 of a container, SIGTERM's default action is to be ignored: `podman stop` would
    # wait out its timeout. Exit on it instead.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    address = (args.host or "0.0.0.0", args.port)
    server = StandinServer(address, args)
    log("INFO", f"stand-in OpenAI API on http://{address[0]}:{address[1]} ({len(actors)} ranks)")
    if actors:
        threading.Thread(target=watch_ranks, args=(actors,), daemon=True).start()
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())

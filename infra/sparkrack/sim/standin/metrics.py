"""The stand-in's vllm:* metrics under their real names and buckets, in Prometheus' text format.
Standard library only (it runs in the stand-in image)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

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

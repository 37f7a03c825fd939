"""What a service answers over HTTP, asked from the node itself on the service's planned address."""

from __future__ import annotations

import json
import shlex

from sparkrack.facts import Fact

ASK_TIMEOUT_S = 5


def parse_served_models(stdout: str) -> tuple[str, ...] | None:
    """The model ids of an OpenAI `/v1/models` answer; None when nothing answered."""
    if not stdout.strip():
        return None
    try:
        return tuple(str(model["id"]) for model in json.loads(stdout)["data"])
    except (ValueError, KeyError, TypeError) as error:
        raise ValueError(f"/v1/models answered without a model list: {stdout[:200]!r}") from error


def served_models(url: str) -> Fact[tuple[str, ...] | None]:
    # -f: an HTTP error is no answer, like a refused connection.
    command = f"curl -sf --max-time {ASK_TIMEOUT_S} {shlex.quote(url)} || true"
    return Fact(command, parse_served_models)


IN_FLIGHT = ("vllm:num_requests_running", "vllm:num_requests_waiting")


def parse_requests_in_flight(stdout: str) -> int | None:
    """The requests vLLM is running or holding in its queue, summed over its engines, from its
    Prometheus page; None when nothing answered."""
    if not stdout.strip():
        return None
    total = 0.0
    for line in stdout.splitlines():
        name, _, rest = line.partition("{")
        if name in IN_FLIGHT:
            total += float(rest.rsplit("}", 1)[1].split()[0])
    return int(total)


def requests_in_flight(url: str) -> Fact[int | None]:
    """vLLM's /metrics, only its lines that count requests (its page is long)."""
    names = "|".join(IN_FLIGHT)
    ask = f"curl -sf --max-time {ASK_TIMEOUT_S} {shlex.quote(url)}"
    return Fact(
        f"{{ {ask} || true; }} | grep -E '^({names})\\{{' || true", parse_requests_in_flight
    )

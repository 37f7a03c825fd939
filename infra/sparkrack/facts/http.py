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


def bearer(key_secret: str) -> str:
    """A command printing the `Authorization: Bearer <key>` header of the API's key, held in the
    Podman secret `key_secret` (run it as the secret's owner): piped into `curl -H @-`, the key
    is on no command line `ps` shows."""
    header = shlex.quote("Authorization: Bearer {{.SecretData}}")
    return f"podman secret inspect --showsecret --format {header} {shlex.quote(key_secret)}"


def asking(url: str, key_secret: str | None, flags: str) -> str:
    """curl of `url` (bounded), with the API's key when it asks for one."""
    ask = f"curl {flags} --max-time {ASK_TIMEOUT_S} {shlex.quote(url)}"
    return f"{bearer(key_secret)} | {ask} -H @-" if key_secret else ask


def served_models(url: str, key_secret: str | None = None) -> Fact[tuple[str, ...] | None]:
    # -f: an HTTP error is no answer, like a refused connection.
    return Fact(f"{asking(url, key_secret, '-sf')} || true", parse_served_models)


def parse_status(stdout: str) -> int | None:
    """curl's `%{http_code}`; None when nothing answered (curl says 000)."""
    code = int(stdout.strip() or 0)
    return code or None


def http_status(url: str, key_secret: str | None = None) -> Fact[int | None]:
    """The HTTP status `url` answers, asked without a key or with the API's (`key_secret`)."""
    flags = "-s -o /dev/null -w '%{http_code}'"
    return Fact(f"{asking(url, key_secret, flags)} || true", parse_status)


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

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

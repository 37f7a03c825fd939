"""One streamed completion against an OpenAI-compatible endpoint, timed token by token.

Standard library only (http.client): the benchmark must not depend on an HTTP package, and it
needs the arrival time of each server-sent event, which higher-level clients buffer away.
"""

from __future__ import annotations

import http.client
import json
import time
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

REQUEST_TIMEOUT_S = 600.0


class EndpointError(Exception):
    """The endpoint refused or broke a request; the message names the URL."""


@dataclass(frozen=True)
class StreamTiming:
    """When one streamed request was sent, when each content chunk arrived, and its usage."""

    sent: float
    chunk_times: tuple[float, ...]
    finished: float
    completion_tokens: int
    prompt_tokens: int

    @property
    def ttft_s(self) -> float:
        return self.chunk_times[0] - self.sent

    @property
    def tpot_s(self) -> float | None:
        """Time per output token after the first: the decode loop alone, prefill excluded.
        Counted from usage, so a chunk carrying several tokens is not mistaken for one."""
        if self.completion_tokens < 2 or len(self.chunk_times) < 2:
            return None
        return (self.chunk_times[-1] - self.chunk_times[0]) / (self.completion_tokens - 1)

    @property
    def decode_tok_s(self) -> float | None:
        tpot = self.tpot_s
        return 1.0 / tpot if tpot else None

    @property
    def end_to_end_tok_s(self) -> float:
        return self.completion_tokens / (self.finished - self.sent)


@dataclass(frozen=True)
class Endpoint:
    """The base URL of an OpenAI-compatible server, e.g. http://198.18.0.11:8000, and the key it
    asks for (the stack's sparkrack:apiKey), if any: sent with every request, never shown."""

    url: str
    api_key: str | None = field(default=None, repr=False)

    def headers(self) -> dict[str, str]:
        """`Authorization: Bearer <key>` when the endpoint asks for a key (vLLM's --api-key)."""
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def connection(self) -> http.client.HTTPConnection:
        parts = urllib.parse.urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise EndpointError(f"{self.url}: expected http://HOST:PORT")
        kind = (
            http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        )
        return kind(parts.hostname, parts.port, timeout=REQUEST_TIMEOUT_S)

    def path(self, suffix: str) -> str:
        return urllib.parse.urlsplit(self.url).path.rstrip("/") + suffix

    def models(self) -> list[str]:
        """The served model names (GET /v1/models): also proves the endpoint answers."""
        body = json.loads(self._get("/v1/models"))
        return [str(entry["id"]) for entry in body.get("data", [])]

    def _get(self, suffix: str) -> bytes:
        conn = self.connection()
        try:
            conn.request("GET", self.path(suffix), headers=self.headers())
            answer = conn.getresponse()
            data = answer.read()
        except (OSError, http.client.HTTPException) as error:
            raise EndpointError(f"{self.url}: unreachable: {error}") from error
        finally:
            conn.close()
        if answer.status != 200:
            raise EndpointError(f"{self.url}{suffix}: HTTP {answer.status}: {data[:200]!r}")
        return data


def completion_body(model: str, prompt: str, max_tokens: int) -> dict[str, Any]:
    # ignore_eos (a vLLM extension, ignored elsewhere) fixes the output length: every repetition
    # then measures the same number of tokens.
    return {
        "model": model,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def stream_completion(
    endpoint: Endpoint,
    model: str,
    prompt: str,
    max_tokens: int,
    clock: Callable[[], float] = time.monotonic,
) -> StreamTiming:
    """POST /v1/completions with stream=true; the time of every chunk that carries text."""
    conn = endpoint.connection()
    body = json.dumps(completion_body(model, prompt, max_tokens))
    headers = {
        "Content-Type": "application/json",
        "Accept": "text/event-stream",
        **endpoint.headers(),
    }
    try:
        sent = clock()
        conn.request("POST", endpoint.path("/v1/completions"), body=body, headers=headers)
        answer = conn.getresponse()
        if answer.status != 200:
            detail = answer.read()[:300].decode(errors="replace")
            raise EndpointError(f"HTTP {answer.status}: {detail}")
        return timed_events(sent, events(answer), clock)
    except EndpointError as error:
        raise EndpointError(f"{endpoint.url}: {error}") from None
    except (OSError, http.client.HTTPException) as error:
        raise EndpointError(f"{endpoint.url}: request failed: {error}") from error
    finally:
        conn.close()


def events(answer: http.client.HTTPResponse) -> Iterator[dict[str, Any]]:
    """The JSON payloads of `data:` lines up to `data: [DONE]`."""
    for raw in answer:
        line = raw.decode().strip()
        if line == "data: [DONE]":
            return
        if line.startswith("data: "):
            yield json.loads(line.removeprefix("data: "))
    raise EndpointError("the stream ended without `data: [DONE]`")


def timed_events(
    sent: float, payloads: Iterator[dict[str, Any]], clock: Callable[[], float]
) -> StreamTiming:
    chunk_times: list[float] = []
    usage: dict[str, Any] = {}
    for payload in payloads:
        now = clock()
        if any(choice.get("text") for choice in payload.get("choices") or []):
            chunk_times.append(now)
        usage = payload.get("usage") or usage
    if not chunk_times:
        raise EndpointError("the stream carried no tokens")
    return StreamTiming(
        sent=sent,
        chunk_times=tuple(chunk_times),
        finished=clock(),
        # Without usage (a server that ignores stream_options) a chunk counts as one token.
        completion_tokens=int(usage.get("completion_tokens", len(chunk_times))),
        prompt_tokens=int(usage.get("prompt_tokens", 0)),
    )

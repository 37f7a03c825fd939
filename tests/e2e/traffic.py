"""A client's view of the API while `up` changes the rack: completions streamed back to back and a
one-token completion every quarter second, from this machine, each attempt recorded with its times
and how it ended. What a rollout must never do is cut a request the engine had admitted."""

from __future__ import annotations

import http.client
import json
import threading
import time
from dataclasses import dataclass
from types import TracebackType

from sparkrack.ops.bench.openai_stream import Endpoint, EndpointError, completion_body, events
from tests.e2e.conftest import SIM_API_KEY

PROBE_EVERY_S = 0.25
STREAM_TOKENS = 120  # three seconds at the stand-in's 40 tokens per second


@dataclass(frozen=True)
class Attempt:
    started: float  # Unix time, as the rollout's own stamps
    ended: float
    outcome: str  # "ok"; "refused" (never admitted: no connection, or an HTTP error); "cut"


def body_for(model: str | None, prompt: str, max_tokens: int) -> str:
    """A streamed completion; without a model, the served one (vLLM and the stand-in take the
    first served name), so that a client rides through a model swap."""
    body = completion_body(model or "", prompt, max_tokens)
    return json.dumps({key: value for key, value in body.items() if key != "model" or model})


def stream_once(endpoint: Endpoint, model: str | None) -> Attempt:
    connection, started = endpoint.connection(), time.time()
    body = body_for(model, "drain me", STREAM_TOKENS)
    try:
        connection.request(
            "POST", endpoint.path("/v1/completions"), body=body, headers=endpoint.headers()
        )
        answer = connection.getresponse()
    except (OSError, http.client.HTTPException):
        return Attempt(started, time.time(), "refused")
    try:
        if answer.status != 200:
            return Attempt(started, time.time(), "refused")
        for _ in events(answer):  # through `data: [DONE]`, or it raises
            pass
        return Attempt(started, time.time(), "ok")
    except (OSError, http.client.HTTPException, EndpointError, ValueError):
        return Attempt(started, time.time(), "cut")
    finally:
        connection.close()


def probe_once(endpoint: Endpoint, model: str | None) -> Attempt:
    """A one-token completion: whether the engine admits a request now (a draining vLLM still
    answers /v1/models and /health, and rejects completions)."""
    connection, started = endpoint.connection(), time.time()
    body = body_for(model, "probe", 1)
    try:
        connection.request(
            "POST", endpoint.path("/v1/completions"), body=body, headers=endpoint.headers()
        )
        answer = connection.getresponse()
        answer.read()
        outcome = "ok" if answer.status == 200 else "refused"
    except (OSError, http.client.HTTPException):
        outcome = "refused"
    finally:
        connection.close()
    return Attempt(started, time.time(), outcome)


class Traffic:
    """`streams` clients and one probe, running until the block ends."""

    def __init__(self, url: str, model: str | None, streams: int = 2) -> None:
        self.endpoint, self.model = Endpoint(url, SIM_API_KEY), model
        self.stop = threading.Event()
        self.streamed: list[Attempt] = []
        self.probed: list[Attempt] = []
        self.threads = [threading.Thread(target=self.stream) for _ in range(streams)]
        self.threads.append(threading.Thread(target=self.probe))

    def stream(self) -> None:
        while not self.stop.is_set():
            attempt = stream_once(self.endpoint, self.model)
            self.streamed.append(attempt)
            if attempt.outcome != "ok":
                time.sleep(PROBE_EVERY_S)

    def probe(self) -> None:
        while not self.stop.wait(PROBE_EVERY_S):
            self.probed.append(probe_once(self.endpoint, self.model))

    def __enter__(self) -> Traffic:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(60)

    def downtime_seen(self, since: float) -> float:
        """From the first probe refused at or after `since` to the end of the first that was
        answered again."""
        probes = sorted(self.probed, key=lambda attempt: attempt.started)
        down = next(p for p in probes if p.started >= since and p.outcome != "ok")
        back = next(p for p in probes if p.started > down.started and p.outcome == "ok")
        return back.ended - down.started

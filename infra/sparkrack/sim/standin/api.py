"""The stand-in's OpenAI API: filler tokens paced at `--token-rate` per stream, at most
`--max-num-seqs` at once as vLLM's scheduler admits them, completions and chat, streamed or not,
/v1/models, /health and /metrics. Standard library only (it runs in the stand-in image)."""

from __future__ import annotations

import hmac
import json
import threading
import time
import uuid
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

if __package__:  # imported: the tests, and sparkrack on the host
    from sparkrack.sim.standin.metrics import Metrics
    from sparkrack.sim.standin.serve_args import ServeArgs, log
else:  # run in the stand-in image, where its files lie side by side
    from metrics import Metrics  # type: ignore[import-not-found,no-redef]
    from serve_args import ServeArgs, log  # type: ignore[import-not-found,no-redef]

# Filler that says what it is, for anyone reading a "completion" from the simulated cluster.
FILLER = ("this", "is", "sparkrack's", "engine", "stand-in,", "not", "a", "model;", "filler")
DEFAULT_MAX_TOKENS = 16  # the OpenAI completions default; the stand-in uses it for chat too
DEFAULT_MAX_MODEL_LEN = 8192  # stands in for the model config's max positions


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

    def __init__(
        self, address: tuple[str, int], args: ServeArgs, api_key: str | None = None
    ) -> None:
        super().__init__(address, Handler)
        self.args = args
        self.api_key = api_key  # vLLM's VLLM_API_KEY: asked of every /v1 request when set
        self.metrics = Metrics(args.model_name, args.max_model_len or DEFAULT_MAX_MODEL_LEN)
        self.engine = Engine(args.token_rate, args.max_num_seqs, self.metrics)
        self.draining = threading.Event()
        self.answering = 0  # completions whose response is not fully written yet
        self.answering_lock = threading.Lock()

    def answering_one(self, delta: int) -> None:
        with self.answering_lock:
            self.answering += delta

    def drain(self, timeout_s: float, poll_s: float = 0.1) -> int:
        """vLLM's shutdown with --shutdown-timeout (vllm/entrypoints/launcher.py, 0.26.0): the
        engine admits nothing new (a new completion is rejected) while the HTTP server still
        runs (/health, /v1/models and /metrics answer), the requests in flight finish for at
        most `timeout_s`, then the HTTP server stops. Call it from a thread other than
        serve_forever's. Returns how many were still unanswered at the deadline (cut off)."""
        self.draining.set()
        deadline = time.monotonic() + timeout_s
        while self.answering and time.monotonic() < deadline:
            time.sleep(poll_s)
        left = self.answering
        self.shutdown()  # serve_forever returns
        self.server_close()  # and a connection is refused from now on
        return left


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: StandinServer

    def refused(self) -> bool:
        """vLLM's AuthenticationMiddleware (0.27.1): with a key, a /v1 request without
        `Authorization: Bearer <key>` is answered 401 `{"error": "Unauthorized"}`; /health and
        /metrics are not guarded."""
        key = self.server.api_key
        if not key or not self.path.startswith("/v1"):
            return False
        scheme, _, given = (self.headers.get("Authorization") or "").partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(given.encode(), key.encode()):
            return False
        self.rfile.read(int(self.headers.get("Content-Length") or 0))  # the connection goes on
        self.send_json(401, {"error": "Unauthorized"})
        return True

    def do_GET(self) -> None:
        if self.refused():
            return
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
        if self.refused():
            return
        if self.server.draining.is_set():  # not admitted: nothing in flight to wait for
            self.send_error_json(BadRequest(503, "Server shutting down"))
            return
        self.server.answering_one(1)
        try:
            if self.path not in routes:
                raise BadRequest(404, f"Not Found: {self.path}")
            self.complete(self.read_json(), chat=routes[self.path])
        except BadRequest as error:
            self.send_error_json(error)
        finally:
            self.server.answering_one(-1)

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
        kinds = {404: "NotFoundError", 503: "ServiceUnavailableError"}
        kind = kinds.get(error.status, "BadRequestError")
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

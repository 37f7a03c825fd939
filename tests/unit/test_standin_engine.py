"""The engine stand-in's pure parts: command line, layer partition, NCCL line, SSE, metrics."""

from __future__ import annotations

import ast
import http.client
import json
import re
import socket
import sys
import threading
import time
from pathlib import Path

import pytest

from sparkrack.sim.standin import api, engine, metrics, serve_args
from sparkrack.sim.standin.api import Engine, Reply
from sparkrack.sim.standin.image import HERE, SOURCE_NAMES
from sparkrack.sim.standin.metrics import Metrics
from sparkrack.sim.standin.serve_args import StandinError

pytestmark = pytest.mark.unit

# --- command line ---------------------------------------------------------------------------


def test_parses_the_seed_001_serve_command() -> None:
    argv = """serve cyankiwi/MiniMax-M2.7-AWQ-4bit --host 0.0.0.0 --port 8000
        --served-model-name minimax --tensor-parallel-size 2 --pipeline-parallel-size 1
        --distributed-executor-backend ray --gpu-memory-utilization 0.80 --max-model-len 131072
        --max-num-seqs 4 --trust-remote-code --token-rate 25 --hf-overrides"""
    overrides = '{"architectures": ["MiniMaxM2ForCausalLM"]}'

    args = serve_args.parse_args([*argv.split(), overrides])

    assert args.model_name == "minimax"
    assert args.world_size == 2
    assert (args.gpu_memory_utilization, args.max_model_len, args.max_num_seqs) == (0.8, 131072, 4)
    assert args.hf_overrides == {"architectures": ["MiniMaxM2ForCausalLM"]}
    assert args.trust_remote_code
    assert args.token_rate == 25.0


def test_defaults_follow_vllm_and_the_stand_in_rate() -> None:
    args = serve_args.parse_args(["serve", "some/model"])

    assert (args.host, args.port, args.model_name) == (None, 8000, "some/model")
    assert (args.world_size, args.max_num_seqs, args.token_rate) == (1, 256, 40.0)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["serve", "m", "--bogus-flag", "1"],
            "vllm: error: unrecognized arguments: --bogus-flag 1",
        ),
        (["serve", "m", "--hf-overrides", "{not json"], "Failed to parse '{not json' as JSON"),
        (["serve", "m", "--tensor-parallel-size", "0"], "must be at least 1, got 0"),
        (["serve", "m", "--gpu-memory-utilization", "1.5"], "must be within (0, 1], got 1.5"),
        (["serve", "m", "--token-rate", "0"], "must be greater than 0"),
        (["serve"], "the following arguments are required: model"),
        (["run", "m"], "invalid choice: 'run'"),
    ],
)
def test_bad_command_lines_exit_2_like_argparse(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        serve_args.parse_args(argv)

    assert exited.value.code == 2
    assert message in capsys.readouterr().err


def test_only_the_ray_backend_is_simulated() -> None:
    with pytest.raises(StandinError, match="the stand-in runs only ray"):
        serve_args.parse_args(["serve", "m", "--distributed-executor-backend", "mp"])


# --- VLLM_PP_LAYER_PARTITION ----------------------------------------------------------------


def test_a_balanced_partition_is_accepted() -> None:
    assert serve_args.pp_layer_partition("16,16,15,15", 4, 62) == [16, 16, 15, 15]
    assert serve_args.pp_layer_partition(None, 4, 62) == []


@pytest.mark.parametrize(
    ("value", "pp_size", "layers", "message"),
    [
        ("31,x", 2, 62, "Invalid partition string: 31,x"),
        ("20,20,22", 2, 62, "len(partitions)=3 does not match pp_size=2."),
        ("30,30", 2, 62, "sum(partitions)=60 does not match num_hidden_layers=62."),
    ],
)
def test_partition_errors_read_as_vllms(
    value: str, pp_size: int, layers: int, message: str
) -> None:
    with pytest.raises(StandinError) as raised:
        serve_args.pp_layer_partition(value, pp_size, layers)

    assert str(raised.value) == message


def test_the_layer_count_comes_from_hf_overrides() -> None:
    overridden = serve_args.parse_args(
        ["serve", "m", "-pp", "2", "--hf-overrides", '{"num_hidden_layers": 62}']
    )
    unknown = serve_args.parse_args(["serve", "m", "-pp", "2"])

    with pytest.raises(StandinError, match="num_hidden_layers=62"):
        engine.check_layer_partition(overridden, "30,30")
    engine.check_layer_partition(unknown, "30,30")  # no layer count: only the stage count checks


# --- OpenAI API shapes ----------------------------------------------------------------------


def sse_payloads(events: list[bytes]) -> list[dict[str, object] | str]:
    payloads: list[dict[str, object] | str] = []
    for event in events:
        text = event.decode()
        assert text.startswith("data: ") and text.endswith("\n\n"), text
        data = text[len("data: ") : -2]
        payloads.append(data if data == "[DONE]" else json.loads(data))
    return payloads


def test_sse_events_are_compact_json_after_data() -> None:
    assert api.sse_event({"a": [1, 2]}) == b'data: {"a":[1,2]}\n\n'
    assert api.sse_event("[DONE]") == b"data: [DONE]\n\n"


def test_a_streamed_chat_opens_with_the_role_and_ends_with_usage_and_done() -> None:
    reply = Reply(chat=True, model="minimax")
    tokens = iter(["a", " b", " c"])

    payloads = sse_payloads(list(api.stream_events(reply, tokens, 7, include_usage=True)))

    assert payloads[-1] == "[DONE]"
    chunks = [p for p in payloads[:-1] if isinstance(p, dict)]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[0]["choices"] == [
        {
            "index": 0,
            "delta": {"role": "assistant", "content": ""},
            "logprobs": None,
            "finish_reason": None,
        }
    ]
    deltas = [c["choices"][0] for c in chunks[1:4]]  # type: ignore[index]
    assert [d["delta"]["content"] for d in deltas] == ["a", " b", " c"]
    assert [d["finish_reason"] for d in deltas] == [None, None, "length"]
    assert chunks[4]["choices"] == []
    assert chunks[4]["usage"] == {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}


def test_a_streamed_completion_without_usage_has_no_usage_chunk() -> None:
    reply = Reply(chat=False, model="m")

    payloads = sse_payloads(list(api.stream_events(reply, iter(["x", " y"]), 1, False)))

    assert len(payloads) == 3 and payloads[-1] == "[DONE]"
    assert all(isinstance(p, str) or "usage" not in p for p in payloads)
    assert [p["choices"][0]["text"] for p in payloads[:2]] == ["x", " y"]  # type: ignore[index]


def test_whole_replies_have_the_openai_shapes() -> None:
    usage = api.usage(2, 3)

    chat = Reply(chat=True, model="m").whole("a b c", usage)
    text = Reply(chat=False, model="m").whole("a b c", usage)

    assert chat["object"] == "chat.completion" and str(chat["id"]).startswith("chatcmpl-")
    assert chat["choices"][0]["message"] == {"role": "assistant", "content": "a b c"}
    assert text["object"] == "text_completion" and str(text["id"]).startswith("cmpl-")
    assert text["choices"][0]["text"] == "a b c" and text["usage"]["total_tokens"] == 5


def test_prompt_tokens_are_whitespace_separated_words() -> None:
    messages = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "two  words\n"}]},
    ]

    assert api.count_prompt_tokens(api.prompt_text({"messages": messages}, chat=True)) == 4
    assert api.count_prompt_tokens(api.prompt_text({"prompt": ["a b c"]}, chat=False)) == 3


def test_max_tokens_defaults_and_limits() -> None:
    assert api.max_tokens_of({}) == 16
    assert api.max_tokens_of({"max_tokens": 5, "max_completion_tokens": 9}) == 9
    with pytest.raises(api.BadRequest, match=r"max_tokens must be at least 1, got 0\."):
        api.max_tokens_of({"max_tokens": 0})


# --- metrics --------------------------------------------------------------------------------


def parse_exposition(text: str) -> tuple[dict[str, str], dict[str, float]]:
    """A strict-enough reader of the text format: TYPE per family, and every sample's value."""
    types: dict[str, str] = {}
    helped: set[str] = set()
    samples: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("# HELP "):
            helped.add(line.split()[2])
        elif line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            assert name in helped, f"TYPE before HELP for {name}"
            types[name] = kind
        else:
            match = re.fullmatch(
                r'([a-zA-Z_:][a-zA-Z0-9_:]*)\{model_name="minimax"(,le="[^"]+")?\} (\S+)', line
            )
            assert match, f"not a sample line: {line!r}"
            family = re.sub(r"_(bucket|sum|count)$", "", match[1])
            assert family in types or match[1] in types, f"sample before TYPE: {line}"
            samples[match[1] + (match[2] or "")] = float(match[3])
    assert text.endswith("\n")
    return types, samples


def test_metrics_use_vllms_names_types_and_label() -> None:
    metrics = Metrics("minimax", kv_capacity_tokens=1000)

    types, _ = parse_exposition(metrics.render())

    assert types == {
        "vllm:num_requests_running": "gauge",
        "vllm:num_requests_waiting": "gauge",
        "vllm:kv_cache_usage_perc": "gauge",
        "vllm:prompt_tokens_total": "counter",
        "vllm:generation_tokens_total": "counter",
        "vllm:time_to_first_token_seconds": "histogram",
        "vllm:inter_token_latency_seconds": "histogram",
        "vllm:e2e_request_latency_seconds": "histogram",
    }


def test_histograms_are_cumulative_and_end_at_inf() -> None:
    metrics = Metrics("minimax", kv_capacity_tokens=1000)
    for latency in (0.02, 0.3, 5000.0):
        metrics.ttft.observe(latency)

    _, samples = parse_exposition(metrics.render())

    name = "vllm:time_to_first_token_seconds"
    buckets = [v for k, v in samples.items() if k.startswith(f"{name}_bucket")]
    assert buckets == sorted(buckets)
    assert samples[f'{name}_bucket,le="0.02"'] == 1.0
    assert samples[f'{name}_bucket,le="2560.0"'] == 2.0
    assert samples[f'{name}_bucket,le="+Inf"'] == samples[f"{name}_count"] == 3.0
    assert samples[f"{name}_sum"] == pytest.approx(5000.32)


def test_label_values_are_escaped() -> None:
    assert metrics.escape_label('a"b\\c\nd') == 'a\\"b\\\\c\\nd'


# --- token pacing ---------------------------------------------------------------------------


class FakeTime:
    """A clock that moves only when the engine sleeps."""

    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def test_tokens_are_due_on_a_fixed_schedule() -> None:
    assert [api.token_due(10.0, 40.0, i) for i in range(3)] == [10.025, 10.05, 10.075]


def test_a_stream_is_paced_at_the_token_rate_and_honours_max_tokens() -> None:
    fake, metrics = FakeTime(), Metrics("minimax", kv_capacity_tokens=1000)
    standin = Engine(40.0, max_num_seqs=4, metrics=metrics, clock=fake.clock, sleep=fake.sleep)

    tokens = list(standin.generate(prompt_tokens=5, max_tokens=8))

    assert "".join(tokens).split() == list(api.FILLER[:8])
    assert fake.now - 100.0 == pytest.approx(8 / 40.0)
    assert (metrics.ttft.count, metrics.itl.count, metrics.e2e.count) == (1, 7, 1)
    assert metrics.itl.total == pytest.approx(7 / 40.0)
    assert (metrics.prompt_tokens, metrics.generation_tokens) == (5, 8)
    assert (metrics.running, metrics.kv_tokens) == (0, 0)


def test_sleep_overshoot_does_not_slow_the_stream() -> None:
    fake = FakeTime()
    late = Engine(10.0, 1, Metrics("m", 1), clock=fake.clock, sleep=lambda s: fake.sleep(s + 0.05))

    list(late.generate(prompt_tokens=0, max_tokens=10))

    # Each sleep overshoots by 50 ms; the schedule absorbs it instead of adding 10 x 50 ms.
    assert fake.now - 100.0 == pytest.approx(1.0 + 0.05)


def test_requests_beyond_max_num_seqs_wait_and_count_in_kv_usage() -> None:
    metrics = Metrics("minimax", kv_capacity_tokens=100)
    standin = Engine(1000.0, max_num_seqs=1, metrics=metrics, sleep=lambda _: None)
    first = standin.generate(prompt_tokens=10, max_tokens=5)
    next(first)
    assert metrics.running == 1
    assert metrics.kv_cache_usage() == pytest.approx(0.11)  # 10 prompt + 1 generated of 100

    second = threading.Thread(target=lambda: list(standin.generate(1, 1)))
    second.start()
    deadline = time.monotonic() + 5
    while metrics.waiting != 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert metrics.waiting == 1
    first.close()  # a client that leaves frees its slot
    second.join(timeout=5)

    assert (metrics.waiting, metrics.running, metrics.kv_tokens) == (0, 0, 0)
    assert metrics.generation_tokens == 2


# --- the module runs alone inside the image -------------------------------------------------


def imported_modules(nodes: list[ast.stmt]) -> set[str]:
    return {
        (alias.name if isinstance(node, ast.Import) else node.module or "").split(".")[0]
        for node in nodes
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    }


def guarded_imports(path: Path) -> set[str]:
    """What the file imports under `if __package__:` and its `else:`."""
    guarded = [n for n in ast.parse(path.read_text()).body if isinstance(n, ast.If)]
    return imported_modules([b for n in guarded for b in (*n.body, *n.orelse)])


def test_the_stand_in_imports_only_the_standard_library_and_its_siblings() -> None:
    """In the image the files lie side by side with Ray and no sparkrack: each takes its
    siblings by their plain names there (and by the package's when imported here)."""
    sources = [HERE / name for name in SOURCE_NAMES]
    for path in sources:
        tree = ast.parse(path.read_text())
        assert imported_modules(tree.body) - {"__future__"} <= sys.stdlib_module_names, path
    siblings = {"sparkrack", "serve_args", "api", "metrics", "cuda", "nccl", "reach"}
    assert guarded_imports(Path(engine.__file__)) == siblings - {"metrics"}
    assert guarded_imports(Path(api.__file__)) == {"sparkrack", "serve_args", "metrics"}


# --- shutdown: vLLM's --shutdown-timeout ----------------------------------------------------


def serving(
    argv: list[str], api_key: str | None = None
) -> tuple[api.StandinServer, threading.Thread]:
    args = serve_args.parse_args(["serve", "m", "--host", "127.0.0.1", "--port", "0", *argv])
    server = api.StandinServer(("127.0.0.1", 0), args, api_key)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return server, thread


def stream_completion(port: int, max_tokens: int) -> tuple[socket.socket, bytes]:
    """A streamed completion's request sent on a fresh connection; the socket to read it from."""
    body = json.dumps({"prompt": "hi", "max_tokens": max_tokens, "stream": True}).encode()
    connection = socket.create_connection(("127.0.0.1", port), timeout=10)
    request = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    connection.sendall(request + b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    return connection, connection.recv(4096)  # the headers, once the server took it


def read_to_end(connection: socket.socket) -> bytes:
    received = b""
    while not received.endswith(b"0\r\n\r\n"):
        chunk = connection.recv(4096)
        if not chunk:
            break
        received += chunk
    return received


def test_parses_the_shutdown_timeout() -> None:
    assert serve_args.parse_args(["serve", "m"]).shutdown_timeout == 0  # vLLM's default: abort
    assert (
        serve_args.parse_args(["serve", "m", "--shutdown-timeout", "120"]).shutdown_timeout == 120
    )


def ask(
    port: int,
    method: str,
    path: str,
    body: dict[str, object] | None = None,
    headers: dict[str, str] | None = None,
) -> int:
    """The HTTP status of one request on a fresh connection."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        payload = json.dumps(body).encode() if body is not None else None
        connection.request(method, path, body=payload, headers=headers or {})
        return connection.getresponse().status
    finally:
        connection.close()


def test_with_a_key_every_v1_request_needs_it_and_health_and_metrics_do_not() -> None:
    server, thread = serving([], api_key="sim-key-1")
    port, good = server.server_address[1], {"Authorization": "Bearer sim-key-1"}
    try:
        completion = {"prompt": "hi", "max_tokens": 1}
        assert ask(port, "GET", "/v1/models") == 401
        assert ask(port, "GET", "/v1/models", headers={"Authorization": "Bearer nope"}) == 401
        assert ask(port, "POST", "/v1/completions", completion) == 401
        assert ask(port, "GET", "/v1/models", headers=good) == 200
        assert ask(port, "POST", "/v1/completions", completion, headers=good) == 200
        assert ask(port, "GET", "/health") == 200 and ask(port, "GET", "/metrics") == 200
    finally:
        server.shutdown()
        thread.join(5)


def test_a_drain_admits_nothing_new_and_lets_the_stream_in_flight_finish() -> None:
    server, thread = serving(["--token-rate", "20"])
    port = server.server_address[1]
    connection, head = stream_completion(port, max_tokens=10)  # half a second of tokens
    assert head.startswith(b"HTTP/1.1 200")
    drained: list[int] = []
    drainer = threading.Thread(target=lambda: drained.append(server.drain(10)))
    drainer.start()
    time.sleep(0.1)
    # as vLLM 0.26's: the engine rejects what is new, the HTTP server still answers the rest
    assert ask(port, "POST", "/v1/completions", {"prompt": "late", "max_tokens": 1}) == 503
    assert ask(port, "GET", "/health") == 200
    rest = read_to_end(connection)
    drainer.join(10)
    assert b"data: [DONE]" in head + rest  # the request in flight ended as it would have
    assert drained == [0]
    thread.join(5)  # then the HTTP server stops
    assert not thread.is_alive()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=2)


def test_a_drain_that_runs_out_of_time_says_how_many_it_cuts_off() -> None:
    server, _ = serving(["--token-rate", "2"])
    connection, _ = stream_completion(server.server_address[1], max_tokens=100)  # 50 s
    started = time.monotonic()
    assert server.drain(0.3) == 1
    assert time.monotonic() - started < 5
    connection.close()

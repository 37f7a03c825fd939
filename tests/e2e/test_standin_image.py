"""The engine stand-in image under rootful Podman: a real one-node Ray cluster, the stand-in as
its driver, then the OpenAI API, vllm:* metrics and NCCL's socket fallbacks over loopback.

Every container is started with a unique name and removed by a finalizer, failures included.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sparkrack.sim.standin.image import ensure_standin_image, podman_ulimit_args
from sparkrack.sim.standin.nccl import NCCL_MEMLOCK_NEED_BYTES
from tests.unit.test_standin_nccl import SEED_001_ENV, fake_rdma_tree

pytestmark = pytest.mark.e2e

# The container shares the host's network: the one interface known to exist there is loopback.
SEED_001_NCCL = {**SEED_001_ENV, "NCCL_SOCKET_IFNAME": "lo"}
TOKEN_RATE = 40.0
STARTUP_TIMEOUT_S = 120.0


@pytest.fixture(scope="session")
def standin_image() -> str:
    return ensure_standin_image(lambda line: print(line, flush=True))


RDMA_DEVICES = ("rocep1s0f0", "rocep1s0f1", "roceP2p1s0f0", "roceP2p1s0f1")


@pytest.fixture
def fake_rdma_sysfs(tmp_path: Path) -> Path:
    """/sys/class/infiniband as the simulator fakes it on a GB10 node."""
    return fake_rdma_tree(tmp_path / "infiniband", dict.fromkeys(RDMA_DEVICES, "4: ACTIVE"))


@pytest.fixture(scope="session")
def uverbs_nodes(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Character devices with the uverbs numbers, as the sim node has them, to pass with
    `--device` (nothing drives them here: NCCL only needs to find them)."""
    directory = tmp_path_factory.mktemp("dev-infiniband")
    nodes = []
    for index in range(len(RDMA_DEVICES)):
        node = directory / f"uverbs{index}"
        os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(231, 192 + index))
        nodes.append(node)
    return nodes


@pytest.fixture(scope="session")
def gpu_nodes(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """The GPU's control and device nodes with the driver's numbers, as the sim node has them
    (nothing drives them: the stand-in only needs to find them, as CUDA needs the real ones)."""
    directory = tmp_path_factory.mktemp("dev-nvidia")
    nodes = []
    for name, minor in (("nvidiactl", 255), ("nvidia0", 0)):
        node = directory / name
        os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(195, minor))
        nodes.append(node)
    return nodes


@dataclass(frozen=True)
class Given:
    """What the stand-in's container is given of the hardware, as the inference role gives the
    engine's: the GPU's device nodes (CDI does it there), the RDMA device nodes, and the memlock
    NCCL needs."""

    gpu: bool = True
    rdma_devices: bool = True
    memlock: int = NCCL_MEMLOCK_NEED_BYTES


@dataclass(frozen=True)
class Standin:
    name: str
    port: int

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def logs(self) -> str:
        done = subprocess.run(["podman", "logs", self.name], capture_output=True, text=True)
        return done.stdout + done.stderr

    def running(self) -> bool:
        state = ["podman", "inspect", "--format", "{{.State.Running}}", self.name]
        return subprocess.run(state, capture_output=True, text=True).stdout.strip() == "true"


StandinRunner = Callable[..., tuple[Standin, list[str]]]


@pytest.fixture
def standin_runner(
    standin_image: str, uverbs_nodes: list[Path], gpu_nodes: list[Path]
) -> Iterator[StandinRunner]:
    """Builds the `podman run` for a stand-in on a free loopback port; removes what it started."""
    started: list[str] = []

    def command(
        env: dict[str, str], sysfs: Path, given: Given = Given()
    ) -> tuple[Standin, list[str]]:
        standin = Standin(f"sparkrack-standin-test-{uuid.uuid4().hex[:8]}", free_port())
        started.append(standin.name)
        devices = [f"--device={n}:/dev/{n.name}" for n in gpu_nodes if given.gpu]
        devices += [
            f"--device={n}:/dev/infiniband/{n.name}" for n in uverbs_nodes if given.rdma_devices
        ]
        devices.append(f"--ulimit=memlock={given.memlock}:{given.memlock}")
        return standin, podman_run_args(standin, standin_image, env, sysfs, devices)

    yield command
    for name in started:
        subprocess.run(["podman", "rm", "--force", "--time", "0", name], capture_output=True)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def podman_run_args(
    standin: Standin, image: str, env: dict[str, str], sysfs: Path, given: list[str]
) -> list[str]:
    ray_head = (
        "ray start --head --num-gpus 1 --num-cpus 1 --node-ip-address 127.0.0.1 --port 0"
        " --object-store-memory 100000000 --disable-usage-stats > /tmp/ray-start.log 2>&1"
    )
    serve = (
        f"exec vllm serve test/model --host 127.0.0.1 --port {standin.port}"
        f" --served-model-name standin --tensor-parallel-size 1"
        f" --distributed-executor-backend ray --token-rate {TOKEN_RATE:g}"
    )
    return [
        "podman", "run", "--name", standin.name, "--runtime", "runc", "--network", "host",
        *podman_ulimit_args(), "--shm-size", "256m",
        # /sys is read-only sysfs: a tmpfs on /sys/class gives the fake tree a mount point.
        "--mount", "type=tmpfs,destination=/sys/class,notmpcopyup",
        "--volume", f"{sysfs}:/sys/class/infiniband:ro", *given,
        *(f"--env={key}={value}" for key, value in env.items()),
        image, "sh", "-c", f"{ray_head} && {serve}",
    ]  # fmt: skip


@pytest.fixture
def serving_standin(standin_runner: StandinRunner, fake_rdma_sysfs: Path) -> Standin:
    standin, args = standin_runner(SEED_001_NCCL, fake_rdma_sysfs)
    subprocess.run([*args[:2], "--detach", *args[2:]], check=True, capture_output=True)
    wait_until_healthy(standin)
    return standin


def wait_until_healthy(standin: Standin) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(standin.url("/health"), timeout=2) as answer:
                if answer.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError):
            pass
        if not standin.running():
            pytest.fail(f"the stand-in exited before it served:\n{standin.logs()}")
        time.sleep(0.5)
    pytest.fail(f"no /health within {STARTUP_TIMEOUT_S:.0f}s:\n{standin.logs()}")


def post(standin: Standin, path: str, body: dict[str, Any]) -> urllib.request.Request:
    data = json.dumps(body).encode()
    headers = {"Content-Type": "application/json"}
    return urllib.request.Request(standin.url(path), data=data, headers=headers, method="POST")


def get_text(standin: Standin, path: str) -> str:
    with urllib.request.urlopen(standin.url(path), timeout=10) as answer:
        text: str = answer.read().decode()
        return text


def metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(f'{name}{{model_name="standin"}} '):
            return float(line.split()[-1])
    raise AssertionError(f"{name} not in /metrics")


def stream_chat(standin: Standin, max_tokens: int) -> list[tuple[float, dict[str, Any]]]:
    """Each streamed chunk with the time it arrived."""
    body = {
        "model": "standin",
        "messages": [{"role": "user", "content": "say something, stand-in"}],
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    chunks: list[tuple[float, dict[str, Any]]] = []
    with urllib.request.urlopen(post(standin, "/v1/chat/completions", body), timeout=30) as answer:
        for raw in answer:
            line = raw.decode().strip()
            if line == "data: [DONE]":
                return chunks
            if line.startswith("data: "):
                chunks.append((time.monotonic(), json.loads(line[len("data: ") :])))
    raise AssertionError("the stream ended without data: [DONE]")


def test_a_cached_image_is_found_not_built_again(standin_image: str) -> None:
    said: list[str] = []

    again = ensure_standin_image(said.append)

    assert again == standin_image
    assert not [line for line in said if "podman build" in line], said


def test_the_standin_reports_the_roce_line_and_says_it_is_not_vllm(
    serving_standin: Standin,
) -> None:
    logs = serving_standin.logs()

    assert "sparkrack engine stand-in: this is NOT vLLM" in logs
    expected = (
        "NCCL INFO NET/IB : Using [0]rocep1s0f0:1/RoCE [1]roceP2p1s0f0:1/RoCE [RO]; "
        "OOB lo:127.0.0.1<0>"
    )
    assert expected in logs


def test_a_streamed_chat_arrives_at_the_token_rate_and_shows_in_metrics(
    serving_standin: Standin,
) -> None:
    before = get_text(serving_standin, "/metrics")

    chunks = stream_chat(serving_standin, max_tokens=20)

    tokens = token_times(chunks)
    assert len(tokens) == 20
    assert chunks[-1][1]["usage"] == {
        "prompt_tokens": 3,
        "completion_tokens": 20,
        "total_tokens": 23,
    }
    # 19 intervals at 40 tok/s is 0.475 s: loose bounds, the point is that tokens are paced.
    elapsed = tokens[-1] - tokens[0]
    assert 0.3 < elapsed < 3.0, f"20 tokens took {elapsed:.3f}s at {TOKEN_RATE:g} tok/s"
    after = get_text(serving_standin, "/metrics")
    for name, grew_by in (("vllm:generation_tokens_total", 20), ("vllm:prompt_tokens_total", 3)):
        assert metric(after, name) - metric(before, name) == grew_by
    assert metric(after, "vllm:e2e_request_latency_seconds_count") == 1
    assert metric(after, "vllm:num_requests_running") == 0


def test_concurrent_streams_are_paced_independently(serving_standin: Standin) -> None:
    results: list[list[tuple[float, dict[str, Any]]]] = []
    streams = [
        threading.Thread(target=lambda: results.append(stream_chat(serving_standin, 20)))
        for _ in range(2)
    ]

    for stream in streams:
        stream.start()
    for stream in streams:
        stream.join(timeout=30)

    assert len(results) == 2
    first, second = (token_times(chunks) for chunks in results)
    assert first[0] < second[-1] and second[0] < first[-1], "the streams did not overlap"
    for times in (first, second):
        assert len(times) == 20 and 0.3 < times[-1] - times[0] < 3.0


def token_times(chunks: list[tuple[float, dict[str, Any]]]) -> list[float]:
    return [t for t, c in chunks if c["choices"] and c["choices"][0]["delta"].get("content")]


def test_a_plain_completion_honours_max_tokens(serving_standin: Standin) -> None:
    body = {"model": "standin", "prompt": "one two three four", "max_tokens": 5}

    with urllib.request.urlopen(post(serving_standin, "/v1/completions", body)) as answer:
        reply = json.loads(answer.read())

    assert len(reply["choices"][0]["text"].split()) == 5
    assert reply["usage"] == {"prompt_tokens": 4, "completion_tokens": 5, "total_tokens": 9}


def test_an_unknown_model_is_404_as_in_vllm(serving_standin: Standin) -> None:
    body = {"model": "gpt-4", "prompt": "hi"}

    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(post(serving_standin, "/v1/completions", body))

    assert refused.value.code == 404
    assert json.loads(refused.value.read())["message"] == "The model `gpt-4` does not exist."


def test_models_lists_the_served_name(serving_standin: Standin) -> None:
    models = json.loads(get_text(serving_standin, "/v1/models"))

    assert [m["id"] for m in models["data"]] == ["standin"]


@pytest.mark.parametrize(
    ("env", "given", "nccl_says", "cause_says"),
    [
        (
            {**SEED_001_NCCL, "NCCL_IB_DISABLE": "1"},
            Given(),
            "NCCL INFO NET/Socket : Using [0]lo:127.0.0.1<0>",
            ["NCCL_IB_DISABLE=1 on a node with RDMA devices", "58%", "25 against 40.4 tok/s"],
        ),
        (
            {**SEED_001_NCCL, "NCCL_IB_HCA": "mlx5_0"},
            Given(),
            "NCCL INFO NET/IB : No device found.",
            ["NCCL_IB_HCA=mlx5_0", "TCP sockets"],
        ),
        (
            SEED_001_NCCL,
            Given(rdma_devices=False),
            "NCCL INFO NET/IB : No device found.",
            ["rocep1s0f0:1 (no /dev/infiniband device node in this container)"],
        ),
        (
            SEED_001_NCCL,
            Given(memlock=64 * 1024),
            "NCCL INFO Using network Socket",
            ["memlock limit 65536 B below the 8388608 B NCCL needs"],
        ),
    ],
    ids=["ib-disabled", "missing-hca", "no-dev-infiniband", "low-memlock"],
)
def test_sockets_on_rdma_hardware_serve_on_and_say_why(
    standin_runner: StandinRunner,
    fake_rdma_sysfs: Path,
    env: dict[str, str],
    given: Given,
    nccl_says: str,
    cause_says: list[str],
) -> None:
    """As real NCCL and vLLM: the fallback to TCP sockets is no error, the engine serves; only
    the log says so (NCCL's lines, and the stand-in's summary naming the cause)."""
    standin, args = standin_runner(env, fake_rdma_sysfs, given)
    subprocess.run([*args[:2], "--detach", *args[2:]], check=True, capture_output=True)

    wait_until_healthy(standin)

    logs = standin.logs()
    assert nccl_says in logs and "NCCL INFO Using network Socket" in logs, logs
    assert "Using network IB" not in logs
    assert "stand-in: rank 0 on sockets: " in logs
    for words in cause_says:
        assert words in logs


def test_without_a_gpu_the_standin_refuses_to_start_as_vllm_does(
    standin_runner: StandinRunner, fake_rdma_sysfs: Path
) -> None:
    """A container given no GPU (no CDI device): vLLM stops at start-up; so does the stand-in,
    naming what is missing and how a container gets it."""
    standin, args = standin_runner(SEED_001_NCCL, fake_rdma_sysfs, Given(gpu=False))

    done = subprocess.run(args, capture_output=True, text=True, timeout=STARTUP_TIMEOUT_S)

    assert done.returncode == 1, done.stdout + done.stderr
    logs = standin.logs()
    assert "sparkrack engine stand-in refuses to start: RuntimeError: No CUDA GPUs" in logs, logs
    assert "(no /dev/nvidiactl: give the container the node's CDI device" in logs

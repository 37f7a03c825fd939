"""The head's download script (huggingface_hub's snapshot_download, the one this venv has) against
the stand-in hub, both run here on loopback: the token goes as a bearer header from stdin, the
files vLLM loads arrive at the commit the revision names, a refusal says why in one line and
writes nothing, and nothing half written ever carries a file's name.

What a download cut short costs: a connection cut mid-file resumes in the same run with a Range
(the library retries), and a run killed mid-file leaves the files it finished, which the next run
does not fetch again; the file it was writing starts again from zero (huggingface_hub >= 1.18
deletes or abandons its partial file instead of keeping it for the next run)."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from huggingface_hub.constants import DOWNLOAD_CHUNK_SIZE

from sparkrack.resources.weights import DOWNLOAD_PY, HAS_HUB_PY
from tests.e2e.programs.weights.fake_hub import HUB_PY, hub_args

TOKEN = "hf_unit-test-token"  # the stand-in hub's own
BIG, SMALL = "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"
# The library writes what it receives in chunks of DOWNLOAD_CHUNK_SIZE (10 MiB): a file broken
# past its first chunk has that much on disk to resume from.
BROKEN_AT = DOWNLOAD_CHUNK_SIZE + (1 << 20)
LOADED = {  # what vLLM loads, at the top of the repo: the download's to fetch
    "config.json": 20,
    "model.safetensors.index.json": 50,
    BIG: DOWNLOAD_CHUNK_SIZE + (2 << 20),
    SMALL: 1 << 20,
}
NOT_LOADED = {  # in the repo, never fetched: docs, pickled copies, subfolders, dotfiles
    "README.md": 10,
    "pytorch_model.bin": 1000,
    "original/consolidated.pth": 1000,
    ".gitattributes": 10,
}


@dataclass(frozen=True)
class Hub:
    endpoint: str
    repo: Path
    log: Path

    def requests(self) -> list[dict[str, str]]:
        return [json.loads(line) for line in self.log.read_text().splitlines()]

    def fetched(self) -> list[str]:
        """The files whose bytes were asked for (GET on resolve), in order."""
        return [r["path"].rsplit("/", 1)[1] for r in self.requests() if is_fetch(r)]

    def commit(self) -> str:
        request = urllib.request.Request(f"{self.endpoint}/api/models/org/model/revision/main")
        request.add_header("Authorization", f"Bearer {TOKEN}")
        with urllib.request.urlopen(request, timeout=10) as reply:
            return str(json.load(reply)["sha"])


def is_fetch(request: dict[str, str]) -> bool:
    return request["method"] == "GET" and "/resolve/" in request["path"]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def fill(path: Path, size: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes((bytes(range(256)) * (size // 256 + 1))[:size])


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., Hub]]:
    """Starts a hub serving org/model at main, with the given faults."""
    servers: list[subprocess.Popen[bytes]] = []

    def start(faults: dict[str, dict[str, int]] | None = None) -> Hub:
        repo, log, port = tmp_path / "repo", tmp_path / "hub.log", free_port()
        for name, size in {**LOADED, **NOT_LOADED}.items():
            fill(repo / name, size)
        args = hub_args(str(repo), "org/model", "main", TOKEN, port, str(log), faults)
        servers.append(subprocess.Popen([sys.executable, "-c", HUB_PY, *args]))
        deadline = time.monotonic() + 10
        while not listening(port):
            assert time.monotonic() < deadline, "the stand-in hub did not listen"
            time.sleep(0.05)
        return Hub(f"http://127.0.0.1:{port}", repo, log)

    try:
        yield start
    finally:
        for server in servers:
            server.terminate()
            server.wait()


def command(endpoint: str, into: Path, revision: str = "main") -> list[str]:
    return [sys.executable, "-c", DOWNLOAD_PY, endpoint, "org/model", revision, str(into)]


def download(
    endpoint: str, into: Path, token: str, revision: str = "main"
) -> subprocess.CompletedProcess[str]:
    line = command(endpoint, into, revision)
    return subprocess.run(line, input=f"{token}\n", capture_output=True, text=True, timeout=60)


def named(directory: Path) -> dict[str, bytes]:
    """The files under their own names (the library keeps its own in .cache, a dot entry)."""
    return {p.name: p.read_bytes() for p in directory.iterdir() if not p.name.startswith(".")}


def leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in (directory / ".cache").rglob("*.incomplete"))


def test_this_venvs_huggingface_hub_is_one_the_head_accepts() -> None:
    assert subprocess.run([sys.executable, "-c", HAS_HUB_PY]).returncode == 0


def test_the_right_token_brings_what_vllm_loads_at_the_revisions_commit(
    serve: Callable[..., Hub], tmp_path: Path
) -> None:
    hub = serve()
    done = download(hub.endpoint, tmp_path / "ckpt", TOKEN)
    assert done.returncode == 0, done.stderr
    assert named(tmp_path / "ckpt") == {name: (hub.repo / name).read_bytes() for name in LOADED}
    assert sorted(hub.fetched()) == sorted(LOADED)  # each once, nothing else
    commit = hub.commit()
    assert all(f"/resolve/{commit}/" in r["path"] for r in hub.requests() if is_fetch(r))
    assert all(r["authorized"] for r in hub.requests())
    assert leftovers(tmp_path / "ckpt") == []


def test_a_wrong_token_is_refused_in_one_line_naming_the_repo_and_writes_nothing(
    serve: Callable[..., Hub], tmp_path: Path
) -> None:
    hub = serve()
    done = download(hub.endpoint, tmp_path / "ckpt", "hf_wrong")
    assert done.returncode != 0
    assert done.stderr.strip() == (
        f"org/model@main: HTTP 401 from {hub.endpoint}/api/models/org/model/revision/main: "
        "the token (sparkrack:hfToken) is missing or wrong"
    )
    assert not (tmp_path / "ckpt").exists()
    assert hub.fetched() == []


def test_a_revision_the_repo_lacks_is_named(serve: Callable[..., Hub], tmp_path: Path) -> None:
    hub = serve()
    done = download(hub.endpoint, tmp_path / "ckpt", TOKEN, revision="v9")
    assert done.returncode != 0
    assert done.stderr.strip().endswith(": org/model has no revision v9")
    assert not (tmp_path / "ckpt").exists()


def test_a_hub_that_does_not_answer_is_named(tmp_path: Path) -> None:
    endpoint = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    done = download(endpoint, tmp_path / "ckpt", TOKEN)
    assert done.returncode != 0
    assert done.stderr.strip().startswith(f"org/model@main from {endpoint}: ConnectError")
    assert not (tmp_path / "ckpt").exists()


def test_a_file_already_whole_is_not_fetched_again(
    serve: Callable[..., Hub], tmp_path: Path
) -> None:
    hub = serve()
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / BIG).write_bytes((hub.repo / BIG).read_bytes())  # its sha256 tells
    assert download(hub.endpoint, tmp_path / "ckpt", TOKEN).returncode == 0
    assert sorted(hub.fetched()) == sorted(set(LOADED) - {BIG})


def test_a_connection_cut_mid_file_resumes_where_it_stopped(
    serve: Callable[..., Hub], tmp_path: Path
) -> None:
    hub = serve({"cut": {BIG: BROKEN_AT}})
    done = download(hub.endpoint, tmp_path / "ckpt", TOKEN)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "ckpt" / BIG).read_bytes() == (hub.repo / BIG).read_bytes()
    big = [r for r in hub.requests() if is_fetch(r) and r["path"].endswith(BIG)]
    assert [r.get("range") for r in big] == [None, f"bytes={DOWNLOAD_CHUNK_SIZE}-"]  # the rest


def test_a_killed_download_keeps_what_it_finished_and_no_half_file(
    serve: Callable[..., Hub], tmp_path: Path
) -> None:
    hub, ckpt = serve({"stall": {BIG: BROKEN_AT}}), tmp_path / "ckpt"
    finished = set(LOADED) - {BIG}
    run = subprocess.Popen(command(hub.endpoint, ckpt), stdin=subprocess.PIPE, text=True)
    try:
        assert run.stdin is not None
        run.stdin.write(f"{TOKEN}\n")
        run.stdin.close()
        deadline = time.monotonic() + 8  # before the library's read timeout (10 s) retries
        while not (ckpt.exists() and set(named(ckpt)) >= finished and partial(ckpt)):
            assert run.poll() is None and time.monotonic() < deadline, "no stalled download"
            time.sleep(0.05)
    finally:
        run.send_signal(signal.SIGKILL)
        run.wait()
    assert set(named(ckpt)) == finished  # the stalled file has no name yet
    first = len(hub.fetched())

    done = download(hub.endpoint, ckpt, TOKEN)
    assert done.returncode == 0, done.stderr
    assert hub.fetched()[first:] == [BIG]  # the finished files are not fetched again
    retry = [r for r in hub.requests() if is_fetch(r)][-1]
    assert "range" not in retry  # huggingface_hub >= 1.18 keeps no partial file across runs
    assert named(ckpt) == {name: (hub.repo / name).read_bytes() for name in LOADED}
    assert leftovers(ckpt) == []  # the killed run's partial file is cleared


def partial(ckpt: Path) -> bool:
    """The stalled file's first chunk sits on disk, under the library's temporary name."""
    found = (ckpt / ".cache").rglob("*.incomplete")
    return any(path.stat().st_size >= DOWNLOAD_CHUNK_SIZE for path in found)

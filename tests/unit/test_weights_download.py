"""The head's download script against the stand-in hub, both run here on loopback: the token
goes as a bearer header from stdin, a refusal says why in one line and writes nothing, and a
file already whole is not fetched again (a cut-short download resumes)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparkrack.resources.weights import DOWNLOAD_PY
from tests.e2e.programs.weights.fake_hub import HUB_PY

TOKEN = "hf_unit-test-token"  # the stand-in hub's own


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture
def hub(tmp_path: Path) -> Iterator[tuple[str, Path, Path]]:
    """(endpoint, the repo's files, the request log) of a hub serving org/model at main."""
    repo, log, port = tmp_path / "repo", tmp_path / "hub.log", free_port()
    repo.mkdir()
    for name, size in (("config.json", 20), ("model-00001-of-00002.safetensors", 3 << 20)):
        (repo / name).write_bytes(bytes(range(256)) * (size // 256) + b"x" * (size % 256))
    args = [str(repo), "org/model", "main", TOKEN, str(port), str(log)]
    server = subprocess.Popen([sys.executable, "-c", HUB_PY, *args])
    try:
        deadline = time.monotonic() + 10
        while not listening(port):
            assert time.monotonic() < deadline, "the stand-in hub did not listen"
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}", repo, log
    finally:
        server.terminate()
        server.wait()


def download(endpoint: str, into: Path, token: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-c", DOWNLOAD_PY, endpoint, "org/model", "main", str(into)]
    return subprocess.run(command, input=f"{token}\n", capture_output=True, text=True, timeout=60)


def fetched(log: Path) -> list[str]:
    requests = [json.loads(line) for line in log.read_text().splitlines()]
    return [r["path"].rsplit("/", 1)[1] for r in requests if "/resolve/" in r["path"]]


def test_the_right_token_downloads_every_file_whole(
    hub: tuple[str, Path, Path], tmp_path: Path
) -> None:
    endpoint, repo, log = hub
    done = download(endpoint, tmp_path / "ckpt", TOKEN)
    assert done.returncode == 0, done.stderr
    for path in repo.iterdir():
        assert (tmp_path / "ckpt" / path.name).read_bytes() == path.read_bytes()
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == sorted(fetched(log))


def test_a_wrong_token_is_refused_in_one_line_and_writes_nothing(
    hub: tuple[str, Path, Path], tmp_path: Path
) -> None:
    endpoint = hub[0]
    done = download(endpoint, tmp_path / "ckpt", "hf_wrong")
    assert done.returncode != 0
    assert done.stderr.strip() == (
        f"HTTP 401 from {endpoint}/api/models/org/model/revision/main: "
        "the token (sparkrack:hfToken) is missing or wrong"
    )
    assert not (tmp_path / "ckpt").exists()


def test_a_file_already_whole_is_not_fetched_again(
    hub: tuple[str, Path, Path], tmp_path: Path
) -> None:
    endpoint, repo, log = hub
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "config.json").write_bytes((repo / "config.json").read_bytes())
    assert download(endpoint, tmp_path / "ckpt", TOKEN).returncode == 0
    assert fetched(log) == ["model-00001-of-00002.safetensors"]

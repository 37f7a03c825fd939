"""One refresh per `pulumi up` (asking.read_once): the update's read of a resource trusts what
the same engine run's preview read, and only that."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from sparkrack.asking import read_once
from sparkrack.resources.base import UNREACHABLE, NodeResource, target_of
from sparkrack.resources.files import RemoteFileProvider, sha256_of
from sparkrack.resources.podman_secret import PodmanSecretProvider
from sparkrack.transport.target import Target, Unreachable

from .support import CONNECTION

pytestmark = pytest.mark.unit

STORED: dict[str, Any] = {
    **CONNECTION,
    "path": "/etc/a.conf",
    "content": "a\n",
    "mode": "0644",
    "owner": "root",
    "group": "root",
    "sha256": sha256_of("a\n"),
    "restore": {"made_dirs": []},
}
AS_STORED = {key: STORED[key] for key in RemoteFileProvider.STATE}


class Node:
    """A fake node's file: what observe finds, and how often it was asked."""

    def __init__(self, live: dict[str, Any] | None) -> None:
        self.live, self.asked = live, 0

    def observe(self, _target: Target, _props: object) -> dict[str, Any] | None:
        self.asked += 1
        return self.live


@pytest.fixture
def engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """An engine run the reads belong to; a test changes runs by changing the list's item."""
    run = ["100-5000"]
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(read_once, "engine_run", lambda: run[0])
    return run


def next_process() -> None:
    """The update's provider process: a new one, which has read no record yet."""
    read_once.forget_all()


def reader(monkeypatch: pytest.MonkeyPatch, live: dict[str, Any] | None) -> tuple[Any, Node]:
    provider, node = RemoteFileProvider(), Node(live)
    monkeypatch.setattr(provider, "observe", node.observe)
    return provider, node


def test_the_update_trusts_its_previews_read_and_returns_the_same(
    engine: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    provider, node = reader(monkeypatch, dict(AS_STORED))
    preview = provider.read("id", dict(STORED))
    next_process()
    update = provider.read("id", dict(STORED))
    assert node.asked == 1
    assert (update.id, update.outs, update.inputs) == (preview.id, preview.outs, preview.inputs)


def test_drift_found_by_the_preview_is_read_again(
    engine: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    provider, node = reader(monkeypatch, {**AS_STORED, "mode": "0600"})
    provider.read("id", dict(STORED))
    next_process()
    update = provider.read("id", dict(STORED))
    assert node.asked == 2
    assert update.inputs is not None and update.inputs["mode"] == "0600"


def test_a_missing_resource_is_read_again(
    engine: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    provider, node = reader(monkeypatch, None)
    provider.read("id", dict(STORED))
    next_process()
    assert provider.read("id", dict(STORED)).id == ""
    assert node.asked == 2


def test_a_node_that_could_not_be_read_is_asked_again(
    engine: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    provider = RemoteFileProvider()

    def down(_target: Target, _props: object) -> None:
        raise Unreachable("node spark-2 (198.18.0.12): unreachable on port 22: timed out")

    monkeypatch.setattr(provider, "observe", down)
    marked = provider.read("id", dict(STORED))
    assert marked.outs is not None and UNREACHABLE in marked.outs["connection"]
    next_process()
    node = Node(dict(AS_STORED))
    monkeypatch.setattr(provider, "observe", node.observe)
    provider.read("id", dict(STORED))
    provider.read("id", marked.outs)
    assert node.asked == 2


LATER_READS = {  # the engine run, the resource's id, its props
    "a later preview or up": ("101-5100", "id", STORED),
    "other props": ("100-5000", "id", {**STORED, "path": "/etc/b.conf"}),
    "another resource": ("100-5000", "other", STORED),
}


@pytest.mark.parametrize("later", LATER_READS)
def test_only_the_same_engine_run_and_resource_trust_the_record(
    later: str, engine: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    provider, node = reader(monkeypatch, dict(AS_STORED))
    provider.read("id", dict(STORED))
    engine[0], id_, props = LATER_READS[later]
    next_process()
    provider.read(id_, dict(props))
    assert node.asked == 2


def test_without_an_engine_every_read_asks(monkeypatch: pytest.MonkeyPatch) -> None:
    provider, node = reader(monkeypatch, dict(AS_STORED))  # conftest: engine_run() is None
    provider.read("id", dict(STORED))
    next_process()
    provider.read("id", dict(STORED))
    assert node.asked == 2


def test_the_record_holds_no_secret_nor_its_hash(
    engine: list[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    secret = {**STORED, "content": "hunter2\n", "sha256": sha256_of("hunter2\n")}
    provider, _ = reader(monkeypatch, {key: secret[key] for key in RemoteFileProvider.STATE})
    provider.read("id", secret)
    record = (tmp_path / "sparkrack" / "refresh" / "runs" / "100-5000.tsv").read_text()
    assert len(record.split()) == 1
    public = {key: value for key, value in secret.items() if key not in ("content", "sha256")}
    assert record.split() == [read_once.key("id", public, ())]


def test_records_of_ended_engine_runs_are_removed(
    engine: list[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    runs = tmp_path / "sparkrack" / "refresh" / "runs"
    runs.mkdir(parents=True)
    ended = runs / "99-1.tsv"
    ended.write_text("x\n")
    me = runs / f"{os.getpid()}-{read_once.process_start(os.getpid())}.tsv"
    me.write_text("y\n")
    provider, _ = reader(monkeypatch, dict(AS_STORED))
    provider.read("id", dict(STORED))
    assert not ended.exists() and me.exists()
    assert (runs / "100-5000.tsv").exists()


def test_the_engine_run_is_the_parent_process() -> None:
    pid = os.getppid()
    assert read_once.process_start(pid) is not None
    assert read_once.running(f"{pid}-{read_once.process_start(pid)}")
    assert not read_once.running(f"{pid}-1")


def test_a_secret_output_must_be_left_out_of_the_record() -> None:
    class Leaky(PodmanSecretProvider):
        SECRET = ()

    with pytest.raises(TypeError, match=r"Leaky.SECRET lacks \['value'\]"):
        NodeResource(Leaky(), "s", target_of(STORED), {}, secret_outputs=["value"])

"""The weight resources' node scripts, run here with sh and python3 in a temporary home; the
copy commands, the secret's path and drift, with SSH mocked."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from pulumi.output import Unknown
from pulumi.runtime import rpc

from sparkrack.facts.weights import HASH_CACHE, manifest
from sparkrack.resources import weights
from sparkrack.resources.weights import (
    CheckpointProvider,
    ModelShardsProvider,
    copy_script,
    download_command,
    missing_shards,
    receive_script,
)
from sparkrack.transport import ssh
from sparkrack.transport.target import Result, SshError, Target
from tests.unit.support import CONNECTION

pytestmark = pytest.mark.unit

SECRET = "hf_not_a_real_token_0123456789"


def sh(home: Path, script: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    env = {"HOME": str(home), "PATH": os.environ["PATH"]}
    return subprocess.run(["sh", "-c", script], input=stdin, env=env, capture_output=True)


def run_manifest(home: Path, directory: Path) -> Any:
    """The manifest fact's own command and script, run here with `home` as $HOME."""
    fact = manifest(str(directory))
    assert fact.stdin is not None
    done = sh(home, fact.command, fact.stdin.encode())
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_a_received_file_is_whole_and_its_hash_is_cached_for_the_read(tmp_path: Path) -> None:
    models, data = tmp_path / "models", os.urandom(300_000)
    done = sh(tmp_path, receive_script(str(models), "a.safetensors", sha(data)), data)
    assert done.returncode == 0, done.stderr
    assert (models / "a.safetensors").read_bytes() == data
    want = {"a.safetensors": {"size": len(data), "sha256": sha(data)}}
    assert run_manifest(tmp_path, models) == {"files": want}
    # The read used the receiver's record: a planted digest comes back unchanged...
    (record,) = (tmp_path / HASH_CACHE).iterdir()
    key = record.read_text().split(" ", 1)[1]
    record.write_text(f"planted {key}")
    assert run_manifest(tmp_path, models)["files"]["a.safetensors"]["sha256"] == "planted"
    # ...until the file changes (same size, new bytes): then it is hashed again.
    altered = bytes([data[0] ^ 1]) + data[1:]
    with (models / "a.safetensors").open("r+b") as f:
        f.write(altered[:1])
    assert run_manifest(tmp_path, models)["files"]["a.safetensors"]["sha256"] == sha(altered)


def test_a_short_or_wrong_copy_leaves_nothing_behind(tmp_path: Path) -> None:
    models, data = tmp_path / "models", b"x" * 1000
    done = sh(tmp_path, receive_script(str(models), "a.safetensors", sha(data)), data[:-1])
    assert done.returncode != 0
    assert list(models.iterdir()) == []  # no file, no temporary


def test_the_manifest_says_null_without_the_directory_and_skips_hidden(tmp_path: Path) -> None:
    assert run_manifest(tmp_path, tmp_path / "absent") is None
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / ".a.safetensors.sparkrack-tmp.x").write_text("half")
    (tmp_path / "d" / "config.json").write_text("{}")
    assert set(run_manifest(tmp_path, tmp_path / "d")["files"]) == {"config.json"}


def props(**extra: Any) -> dict[str, Any]:
    return {
        "user": "sparkrack",
        "directory": "/m/snap",
        "files": {"s1": {"size": 3, "sha256": "ab" * 32}},
        "origin": "spark-01",
        "routes": {
            "spark-01": {"directory": "/ckpt", "address": "", "to": "198.19.1.2"},
            "spark-02": {"directory": "/m/snap", "address": "198.19.1.2", "to": "198.19.1.3"},
        },
        **extra,
    }


def test_copies_from_the_head_go_straight_and_from_a_peer_through_the_heads_agent() -> None:
    local = copy_script(props(), "s1", "spark-01", True, "k")
    assert local.startswith("sh -c ") and "ln -f -- /ckpt/s1" in local  # a link, else a copy:
    assert "|| { if (set -o pipefail)" in local and "cat -- /ckpt/s1 | sh -c" in local
    assert "ssh " not in local
    direct = copy_script(props(), "s1", "spark-01", False, "k")
    assert "cat -- /ckpt/s1 | ssh " in direct
    assert direct.index('-i "$HOME"/.ssh/k') < direct.index("sparkrack@198.19.1.2")
    peer = copy_script(props(), "s1", "spark-02", False, "k")
    assert peer.startswith('eval "$(ssh-agent -s)"') and "ssh-agent -k" in peer
    assert " -A " in peer and "sparkrack@198.19.1.2" in peer
    assert peer.endswith('< "$HOME"/.ssh/known_hosts')  # the peer checks with the head's pins
    assert "cat -- /m/snap/s1" in peer and "sparkrack@198.19.1.3" in peer
    assert "StrictHostKeyChecking=yes" in peer


def test_on_a_dhcp_rail_a_copy_goes_to_the_lease_the_node_holds_then(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    leased = {"spark-02": {"directory": "/ckpt", "address": "", "to": "", "to_lease": "enp1"}}
    shown = '[{"ifname": "enp1", "flags": ["UP"], "mtu": 9000, "addr_info": [{"family": "inet",'
    shown += ' "local": "198.19.0.7", "prefixlen": 24, "scope": "global"}]}]'
    asked: list[str] = []

    def run(target: Target, command: str, **_: Any) -> Result:
        asked.append(command)
        return Result(shown, "", 0)

    monkeypatch.setattr(ssh, "run", run)
    node = Target("spark-07", "h", 22, "u", "/k", "/kh")
    routed = weights.with_lease(node, props(routes=leased), "spark-02")
    assert routed["routes"]["spark-02"]["to"] == "198.19.0.7"
    assert "ip -j addr show dev enp1" in asked[0]
    script = copy_script(routed, "s1", "spark-02", False, "k")
    assert "-o HostKeyAlias=spark-07 sparkrack@198.19.0.7" in script  # the key pinned by name
    monkeypatch.setattr(ssh, "run", lambda target, command, **_: Result("", "", 0))
    with pytest.raises(SshError, match="enp1 has no DHCP lease"):
        weights.with_lease(node, props(routes=leased), "spark-02")


def test_the_download_command_holds_no_token_and_the_token_goes_on_stdin(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    download = {"endpoint": "http://hf", "repo": "org/m", "revision": "main"}
    command = download_command("sparkrack", download, "/ckpt")
    assert SECRET not in command and "org/m" in command
    calls: list[tuple[str, str | None]] = []

    def run(target: Target, line: str, **kw: Any) -> Result:
        calls.append((line, kw.get("stdin")))
        raise SshError(f"{target.where()}: `{line}` exited 1: HTTP Error 401")

    monkeypatch.setattr(ssh, "run", run)
    target = Target("spark-01", "h", 22, "u", "/k", "/kh")
    checkpoint = {"user": "sparkrack", "directory": "/ckpt", "download": download}
    with pytest.raises(SshError) as failed:
        CheckpointProvider().apply(target, {**checkpoint, "token": SECRET}, None)
    assert calls == [(command, SECRET + "\n")]
    assert SECRET not in str(failed.value) and "org/m" in str(failed.value)


def test_a_stack_directory_without_its_shards_is_refused_naming_them() -> None:
    files: dict[str, Any] = {"model.safetensors.index.json": {}, "s1": {}}
    assert missing_shards(files, {"s1": {}, "s2": {}}) == ["s2"]
    assert missing_shards({"s1": {}}, {}) == ["model.safetensors.index.json"]
    target = Target("spark-01", "h", 22, "u", "/k", "/kh")
    live = {"complete": False, "missing": ["s2"]}
    checkpoint = {"user": "u", "directory": "/ckpt", "download": None, "token": ""}
    with pytest.raises(SshError, match=r"spark-01.*lacks s2"):
        CheckpointProvider().apply(target, checkpoint, live)


def test_a_missing_or_altered_file_reads_as_drift(monkeypatch: pytest.MonkeyPatch) -> None:
    provider = ModelShardsProvider()
    want = {"s1": {"size": 3, "sha256": "a" * 64}, "s2": {"size": 3, "sha256": "b" * 64}}
    stored = {
        "node": "spark-02",
        "connection": {"host": "h", "port": 22, "user": "u", "key_path": "/k",
                       "known_hosts": "/kh"},
        **props(files=want, sources={"s1": "spark-01", "s2": "spark-01"}),
        "via": {}, "key_name": "k",
    }  # fmt: skip
    live = {"s1": want["s1"], "s2": {"size": 3, "sha256": "c" * 64}}
    monkeypatch.setattr(weights, "gather", lambda target, fact: live)
    read = provider.read("spark-02:x", stored)
    assert read.inputs is not None and read.inputs["files"] == live
    assert read.outs is not None
    assert provider.diff("spark-02:x", read.outs, stored).changes is not False
    monkeypatch.setattr(weights, "gather", lambda target, fact: want)
    read = provider.read("spark-02:x", stored)
    assert read.outs is not None
    assert provider.diff("spark-02:x", read.outs, stored).changes is False


def test_apply_copies_only_what_differs_and_drops_strays(monkeypatch: pytest.MonkeyPatch) -> None:
    provider, copied, ran = ModelShardsProvider(), list[str](), list[str]()
    monkeypatch.setattr(provider, "copy", lambda target, p, name: copied.append(name))
    monkeypatch.setattr(ssh, "run", lambda target, line, **kw: ran.append(line))
    want = {"s1": {"size": 3, "sha256": "a" * 64}, "s2": {"size": 3, "sha256": "b" * 64}}
    live = {"files": {"s1": want["s1"], "s2": {"size": 2, "sha256": "b" * 64}, "old": {}}}
    target = Target("spark-02", "h", 22, "u", "/k", "/kh")
    provider.apply(target, props(files=want), live)
    assert copied == ["s2"]
    assert len(ran) == 1 and "rm -f -- /m/snap/old" in ran[0]


def test_check_refuses_a_file_without_a_source() -> None:
    failures = ModelShardsProvider().validate(props(sources={}))
    assert [f.property for f in failures] == ["sources"] and "s1" in failures[0].reason


# A value not known yet, as the provider host hands it over (an Unknown), and as the wire has it.
NOT_KNOWN = [Unknown(), rpc.UNKNOWN]  # type: ignore[no-untyped-call]


@pytest.mark.parametrize("unknown", NOT_KNOWN, ids=["Unknown", "marker"])
def test_a_preview_before_the_download_checks_nothing_it_cannot_know(unknown: object) -> None:
    """On a fresh `weights: {source: download}` stack the files are the download's output, not
    known in a preview (the provider host hands them over as an Unknown): check passes them
    through instead of reading them as a value."""
    news = {**props(sources={}, files=unknown, via={}, key_name="k"), **CONNECTION}
    checked = ModelShardsProvider().check({}, news)
    assert checked.failures == []
    assert checked.inputs == news


def head_props(checkpoint: Path, snapshot: Path, data: bytes) -> dict[str, Any]:
    route = {"directory": str(checkpoint), "address": "", "to": ""}
    files = {"s1": {"size": len(data), "sha256": sha(data)}}
    return props(directory=str(snapshot), files=files, routes={"spark-01": route})


def test_the_heads_share_is_a_link_to_its_checkpoint_one_copy_on_disk(tmp_path: Path) -> None:
    checkpoint, snapshot, data = tmp_path / "ckpt", tmp_path / "snap", os.urandom(100_000)
    checkpoint.mkdir()
    (checkpoint / "s1").write_bytes(data)
    script = copy_script(head_props(checkpoint, snapshot, data), "s1", "spark-01", True, "k")
    done = sh(tmp_path, script)
    assert done.returncode == 0, done.stderr
    assert (snapshot / "s1").stat().st_ino == (checkpoint / "s1").stat().st_ino
    # both records carry the link's stat key: neither read hashes its file again
    records = sorted((tmp_path / HASH_CACHE).iterdir())
    assert len(records) == 2
    for record in records:
        record.write_text(record.read_text().replace(sha(data), "recorded"))
    for directory in (checkpoint, snapshot):
        assert run_manifest(tmp_path, directory)["files"]["s1"]["sha256"] == "recorded"


def test_where_no_link_can_be_made_the_head_copies(tmp_path: Path) -> None:
    checkpoint, snapshot, data = tmp_path / "ckpt", tmp_path / "snap", os.urandom(1000)
    checkpoint.mkdir()
    (checkpoint / "s1").write_bytes(data)
    tools = tmp_path / "bin"  # an `ln` that fails, as across filesystems or owners
    tools.mkdir()
    (tools / "ln").write_text("#!/bin/sh\necho 'ln: Invalid cross-device link' >&2\nexit 1\n")
    (tools / "ln").chmod(0o755)
    script = copy_script(head_props(checkpoint, snapshot, data), "s1", "spark-01", True, "k")
    env = {"HOME": str(tmp_path), "PATH": f"{tools}:{os.environ['PATH']}"}
    done = subprocess.run(["sh", "-c", script], env=env, capture_output=True)
    assert done.returncode == 0, done.stderr
    assert (snapshot / "s1").read_bytes() == data
    assert (snapshot / "s1").stat().st_ino != (checkpoint / "s1").stat().st_ino
    assert [p.name for p in snapshot.iterdir()] == ["s1"]  # no temporary left by the link


def test_shards_count_the_bytes_they_move_none_for_a_model_the_node_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    provider, copied = ModelShardsProvider(), []
    monkeypatch.setattr(provider, "copy", lambda target, props, name: copied.append(name))
    target = Target("spark-02", "h", 22, "u", "/k", "/kh")
    files = {"s1": {"size": 3, "sha256": "a"}, "s2": {"size": 5, "sha256": "b"}}
    wanted = props(files=files)
    assert provider.apply(target, wanted, {"files": {"s1": files["s1"]}}) == {"moved_bytes": 5}
    assert provider.apply(target, wanted, {"files": files}) == {"moved_bytes": 0}
    assert copied == ["s2"]

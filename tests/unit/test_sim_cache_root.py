"""The simulator's image and cache code on a machine that has never run it: the cache root does
not exist yet, and every folder written into is made first (a fresh machine once crashed opening
a build lock in a folder nobody had created). Podman and the builds are faked; the files are real.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from sparkrack.config.cache import cache_root
from sparkrack.sim import images, keys, monitoring_images
from sparkrack.sim.standin import image as standin
from sparkrack.sim.topology import two_node_topology

pytestmark = pytest.mark.unit


@pytest.fixture
def fresh_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "never-made"))
    assert not cache_root().exists()
    return cache_root()


def no_podman_image(module: Any, monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """Podman has no image yet; every other podman call is recorded and succeeds."""
    calls: list[list[str]] = []

    def run(args: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        calls.append(args)
        return subprocess.CompletedProcess(args, 0, "", "")

    monkeypatch.setattr(module, "podman_image_exists", lambda reference: False)
    monkeypatch.setattr(module, "run", run)
    return calls


def test_the_standin_builds_under_its_lock_in_a_fresh_cache_root(
    fresh_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    no_podman_image(standin, monkeypatch)
    built: list[str] = []
    monkeypatch.setattr(standin, "build_image", lambda reference, progress: built.append(reference))

    reference = standin.ensure_standin_image(lambda line: None)

    assert built == [reference]
    assert (fresh_root / "images" / f"engine-standin-{standin.build_key()[:12]}.lock").exists()


def test_the_exporters_build_under_their_lock_in_a_fresh_cache_root(
    fresh_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    no_podman_image(monitoring_images, monkeypatch)
    cadvisor = fresh_root / "cadvisor-v0-test" / "cadvisor"
    monkeypatch.setattr(monitoring_images, "ensure_cadvisor", lambda progress: cadvisor)
    built: list[str] = []
    monkeypatch.setattr(
        monitoring_images, "build_exporters", lambda ref, binary, progress: built.append(ref)
    )

    reference = monitoring_images.ensure_exporters_image(lambda line: None)

    assert built == [reference]
    assert list((fresh_root / "images").glob("exporters-*.lock"))


def test_a_rootfs_image_is_built_into_a_fresh_cache_root(
    fresh_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = no_podman_image(images, monkeypatch)
    recipe = images.RootfsRecipe(suite="trixie")

    def build(name: str, recipe: images.RootfsRecipe, tar: Path, progress: Any) -> None:
        tar.write_bytes(b"tar")

    monkeypatch.setattr(images, "build_rootfs_tar", build)

    images.ensure_rootfs_image("fresh", recipe, lambda line: None)

    assert images.cached_tar_path("fresh", recipe).read_bytes() == b"tar"
    assert calls[-1][:2] == ["podman", "import"]


def test_cluster_keys_are_written_into_a_fresh_cache_root(fresh_root: Path) -> None:
    topology = two_node_topology("fresh-2")

    keys.ensure_cluster_keys(topology)

    assert keys.login_key("fresh-2").exists()
    assert keys.known_hosts_path("fresh-2").read_text().count("ssh-ed25519") == 2

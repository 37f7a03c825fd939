"""The image builder's own paths, with debootstrap stubbed so they run in seconds (root needed:
the builder mounts proc, sys and dev into the chroot)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparkrack.sim import images
from sparkrack.sim.images import RootfsRecipe, cached_tar_path, ensure_rootfs_image, mounted_under
from sparkrack.sim.shell import SimError

from .sim_fixtures import require_host_tools

pytestmark = pytest.mark.e2e

NAME = "e2e-builder-test"
RECIPE = RootfsRecipe(suite="trixie", files=(("/etc/e2e", "made by the builder test\n", 0o600),))


def fake_debootstrap(name: str, recipe: RootfsRecipe, rootfs: Path) -> None:
    (rootfs / "etc").mkdir(parents=True)
    (rootfs / "etc" / "os-release").write_text("ID=e2e\n")


def refuse_debootstrap(name: str, recipe: RootfsRecipe, rootfs: Path) -> None:
    pytest.fail("the builder debootstrapped although the tar was cached")


@pytest.fixture
def isolated_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    require_host_tools()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    yield tmp_path
    subprocess.run(
        ["podman", "rmi", "-f", images.image_reference(NAME, RECIPE)], capture_output=True
    )
    assert mounted_under(tmp_path) == []


def test_build_then_reimport_from_the_cached_tar(
    isolated_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(images, "debootstrap", fake_debootstrap)
    lines: list[str] = []
    reference = ensure_rootfs_image(NAME, RECIPE, lines.append)
    assert reference == f"localhost/sparkrack/{NAME}:{RECIPE.digest()[:12]}"
    assert cached_tar_path(NAME, RECIPE).exists()
    assert list((isolated_cache / "sparkrack" / "build").iterdir()) == []
    assert any(line.startswith(f"image {NAME}: debootstrap trixie: done in") for line in lines)
    content = subprocess.run(
        ["tar", "-xOf", str(cached_tar_path(NAME, RECIPE)), "./etc/e2e"],
        check=True,
        capture_output=True,
        text=True,
    )
    assert content.stdout == "made by the builder test\n"

    # After a Podman reset the cached tar is imported again; nothing is rebuilt.
    subprocess.run(["podman", "rmi", reference], check=True, capture_output=True)
    monkeypatch.setattr(images, "debootstrap", refuse_debootstrap)
    assert ensure_rootfs_image(NAME, RECIPE, lines.append) == reference
    assert images.podman_image_exists(reference)


def test_a_failed_step_leaves_no_mount_no_tar_and_no_build_dir(
    isolated_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(images, "debootstrap", fake_debootstrap)
    broken = RootfsRecipe(suite="trixie", chroot_commands=("true",))  # no shell in the rootfs
    with pytest.raises(SimError, match=f"image {NAME}: `true`"):
        ensure_rootfs_image(NAME, broken, lambda line: None)
    assert mounted_under(isolated_cache) == []
    assert not cached_tar_path(NAME, broken).exists()
    assert list((isolated_cache / "sparkrack" / "build").iterdir()) == []
    assert not images.podman_image_exists(images.image_reference(NAME, broken))

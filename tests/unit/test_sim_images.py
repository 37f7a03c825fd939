"""The image recipe's digest: stable for the same recipe, different for any change."""

from __future__ import annotations

import dataclasses

import pytest

from sparkrack.sim import images
from sparkrack.sim.images import RootfsRecipe, image_reference
from sparkrack.sim.node_image import node_recipe

pytestmark = pytest.mark.unit

BASE = RootfsRecipe(
    suite="trixie",
    variant="minbase",
    packages=("python3", "iproute2"),
    chroot_commands=("useradd demo",),
    files=(("/etc/demo", "hello\n", 0o644),),
    changes=('CMD ["/bin/sh"]',),
)


def test_digest_is_stable_across_equal_recipes() -> None:
    same = RootfsRecipe(**dataclasses.asdict(BASE) | {"packages": ("python3", "iproute2")})
    assert BASE.digest() == same.digest()
    # Pinned: a digest that drifts silently would rebuild every user's cached images.
    assert BASE.digest() == "98cc4821712a7d887a9d2d4b6cb1106ad8f2e742abf686df1a9301d8d0d32176"


@pytest.mark.parametrize(
    "change",
    [
        {"suite": "bookworm"},
        {"variant": ""},
        {"packages": ("iproute2", "python3")},  # order matters to apt's resolution: keep it
        {"chroot_commands": ("useradd demo2",)},
        {"files": (("/etc/demo", "hello\n", 0o600),)},
        {"files": (("/etc/demo", "hello!\n", 0o644),)},
        {"changes": ()},
    ],
)
def test_any_change_makes_a_new_digest(change: dict[str, object]) -> None:
    changed = dataclasses.replace(BASE, **change)  # type: ignore[arg-type]
    assert changed.digest() != BASE.digest()


def test_builder_version_is_part_of_the_digest(monkeypatch: pytest.MonkeyPatch) -> None:
    before = BASE.digest()
    monkeypatch.setattr(images, "BUILDER_VERSION", "next")
    assert BASE.digest() != before


def test_image_reference_names_the_digest() -> None:
    assert image_reference("node", BASE) == f"localhost/sparkrack/node:{BASE.digest()[:12]}"


def test_node_recipe_ships_the_fakes_and_no_host_keys() -> None:
    recipe = node_recipe()
    paths = {path for path, _, _ in recipe.files}
    assert {"/usr/bin/nvidia-smi", "/usr/bin/nvidia-ctk"} <= paths
    assert "/etc/tmpfiles.d/sparkrack-sim-nvidia.conf" in paths
    assert "rm -f /etc/ssh/ssh_host_*" in recipe.chroot_commands
    assert {"podman", "runc", "libpam-systemd", "dbus-user-session"} <= set(recipe.packages)

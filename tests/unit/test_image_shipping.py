"""The script that ships an image from the head, run here by a real shell with stand-ins for
`podman` and `ssh` on PATH: the head saves an image once per id however many nodes it ships to,
drops the archive of an older id, and leaves nothing half written when a save fails."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from sparkrack.resources.image_ship import ARCHIVE_DIR, ship_script

pytestmark = pytest.mark.unit

REFERENCE = "localhost/sparkrack/engine:latest"
# `podman save -o FILE REF` writes REF's bytes (or fails when FAIL_SAVE is set) and counts saves;
# `ssh ... podman load -q` keeps what arrives on stdin as the node's loaded image.
FAKE_PODMAN = """#!/bin/sh
[ "$1" = save ] || exit 2
[ -z "$FAIL_SAVE" ] || { echo partial > "$3"; exit 1; }
echo saved >> "$HOME/saves"
echo "image $4" > "$3"
"""
FAKE_SSH = """#!/bin/sh
cat > "$HOME/loaded-$(echo "$*" | sed 's/.*sparkrack@\\([^ ]*\\).*/\\1/')"
"""


@pytest.fixture
def home(tmp_path: Path) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("podman", FAKE_PODMAN), ("ssh", FAKE_SSH)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    (tmp_path / "home").mkdir()
    return tmp_path / "home"


def ship(home: Path, image_id: str, to: str, fail_save: bool = False) -> int:
    env = {
        "HOME": str(home),
        "PATH": f"{home.parent / 'bin'}{os.pathsep}{os.environ['PATH']}",
        "FAIL_SAVE": "1" if fail_save else "",
    }
    script = ship_script(REFERENCE, image_id, "cluster_key", "sparkrack", to)
    return subprocess.run(["sh", "-c", script], cwd=home, env=env, check=False).returncode


def archives(home: Path) -> list[str]:
    return sorted(path.name for path in (home / ARCHIVE_DIR).glob("*.tar*"))


def test_the_head_saves_an_image_once_for_every_node_it_ships_to(home: Path) -> None:
    for address in ("198.19.0.2", "198.19.0.3", "198.19.0.4"):
        assert ship(home, "sha256:aaaaaaaaaaaa1111", address) == 0
    assert (home / "saves").read_text().splitlines() == ["saved"]
    for address in ("198.19.0.2", "198.19.0.3", "198.19.0.4"):
        assert (home / f"loaded-{address}").read_text() == f"image {REFERENCE}\n"


def test_a_new_image_id_is_saved_again_and_the_old_archive_dropped(home: Path) -> None:
    assert ship(home, "aaaaaaaaaaaa1111", "198.19.0.2") == 0
    assert ship(home, "bbbbbbbbbbbb2222", "198.19.0.2") == 0
    assert len((home / "saves").read_text().splitlines()) == 2
    assert archives(home) == ["localhost_sparkrack_engine_latest@bbbbbbbbbbbb.tar"]


def test_a_failed_save_ships_nothing_and_leaves_no_archive(home: Path) -> None:
    assert ship(home, "aaaaaaaaaaaa1111", "198.19.0.2", fail_save=True) != 0
    assert archives(home) == []
    assert not (home / "loaded-198.19.0.2").exists()

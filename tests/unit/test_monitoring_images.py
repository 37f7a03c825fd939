"""How the monitoring images are named, cached and built, without running Podman or Go."""

from __future__ import annotations

import shutil
from pathlib import Path
from subprocess import CompletedProcess
from typing import Any

import pytest

from sparkrack.sim import monitoring_images as images
from sparkrack.sim.images import RootfsRecipe
from sparkrack.sim.shell import SimError

pytestmark = pytest.mark.unit

CADVISOR = Path("/cache/cadvisor-v0.53.0-aaaaaaaaaaaa/cadvisor")


@pytest.fixture
def scripts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, ...]:
    """Copies of the two scripts that a test may change."""
    copies = tuple(tmp_path / script.name for script in images.SCRIPTS)
    for script, copy in zip(images.SCRIPTS, copies, strict=True):
        shutil.copy(script, copy)
    monkeypatch.setattr(images, "SCRIPTS", copies)
    return copies


def test_the_key_changes_with_each_script_cadvisor_containerfile_and_base(
    scripts: tuple[Path, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    original = images.exporters_key(CADVISOR)
    assert images.exporters_key(CADVISOR) == original

    keys = set()
    for script in scripts:
        kept = script.read_text()
        script.write_text(kept + "\n# changed\n")
        keys.add(images.exporters_key(CADVISOR))
        script.write_text(kept)
    keys.add(images.exporters_key(Path("/cache/cadvisor-v0.53.0-bbbbbbbbbbbb/cadvisor")))
    keys.add(images.exporters_key(Path("/cache/cadvisor-v0.54.0-aaaaaaaaaaaa/cadvisor")))
    monkeypatch.setattr(images, "EXPORTERS_CONTAINERFILE", images.EXPORTERS_CONTAINERFILE + "#\n")
    keys.add(images.exporters_key(CADVISOR))
    monkeypatch.setattr(images, "EXPORTERS_BASE_RECIPE", RootfsRecipe(suite="trixie"))
    keys.add(images.exporters_key(CADVISOR))

    assert len(keys | {original}) == 7


def test_images_come_from_trixie_minbase_with_the_contracts_packages() -> None:
    for recipe in (images.PROMETHEUS_RECIPE, images.EXPORTERS_BASE_RECIPE):
        assert (recipe.suite, recipe.variant) == ("trixie", "minbase")
    assert images.PROMETHEUS_RECIPE.packages == ("prometheus",)
    assert set(images.EXPORTERS_BASE_RECIPE.packages) == {"prometheus-node-exporter", "python3"}


def test_the_exporters_layer_puts_programs_where_the_role_runs_them() -> None:
    containerfile = images.EXPORTERS_CONTAINERFILE
    assert "COPY cadvisor /usr/local/bin/cadvisor" in containerfile
    assert "COPY gpu_exporter.py rdma_textfile.py /opt/sparkrack/" in containerfile
    assert {script.name for script in images.SCRIPTS} == {"gpu_exporter.py", "rdma_textfile.py"}
    assert all(script.is_file() for script in images.SCRIPTS)


def test_the_build_is_offline_and_uses_runc() -> None:
    args = images.podman_build_args("localhost/base:1", "localhost/x:2", "/ctx")
    joined = " ".join(args)
    for expected in ("--runtime runc", "--pull=never", "--network none", "--tag localhost/x:2"):
        assert expected in joined
    assert "--build-arg BASE=localhost/base:1" in joined
    assert args[-1] == "/ctx"


def fake_podman(commands: list[list[str]], listed: str = "") -> Any:
    def run(args: list[str], what: str, check: bool = True, **_: Any) -> CompletedProcess[str]:
        commands.append(list(args))
        return CompletedProcess(args, 0, stdout=listed if args[1] == "images" else "")

    return run


def test_existing_images_are_only_tagged_latest(monkeypatch: pytest.MonkeyPatch) -> None:
    commands: list[list[str]] = []
    monkeypatch.setattr(images, "ensure_cadvisor", lambda progress: CADVISOR)
    monkeypatch.setattr(images, "ensure_rootfs_image", lambda name, recipe, progress: "p:1")
    monkeypatch.setattr(images, "podman_image_exists", lambda reference: True)
    monkeypatch.setattr(images, "run", fake_podman(commands))
    monkeypatch.setattr(images, "build_exporters", lambda *_: pytest.fail("built an existing one"))

    refs = images.ensure_monitoring_images(print)

    exporters = f"localhost/sparkrack/exporters:{images.exporters_key(CADVISOR)[:12]}"
    assert refs == {"prometheus": "p:1", "exporters": exporters}
    tags = [c for c in commands if c[1] == "tag"]
    assert tags == [
        ["podman", "tag", "p:1", "localhost/sparkrack/prometheus:latest"],
        ["podman", "tag", exporters, "localhost/sparkrack/exporters:latest"],
    ]


def test_a_missing_exporters_image_is_built_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    built: list[str] = []
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(images, "ensure_cadvisor", lambda progress: CADVISOR)
    monkeypatch.setattr(images, "podman_image_exists", lambda reference: reference in built)
    monkeypatch.setattr(images, "run", fake_podman([]))
    monkeypatch.setattr(images, "build_exporters", lambda ref, cadvisor, p: built.append(ref))

    first = images.ensure_exporters_image(print)
    second = images.ensure_exporters_image(print)

    assert first == second and built == [first]


def test_superseded_images_are_removed_but_not_latest(monkeypatch: pytest.MonkeyPatch) -> None:
    repository = images.EXPORTERS_REPOSITORY
    listed = f"{repository}:new000000000\n{repository}:old000000000\n{repository}:latest\n"
    commands: list[list[str]] = []
    monkeypatch.setattr(images, "run", fake_podman(commands, listed))

    images.remove_superseded(repository, f"{repository}:new000000000")

    assert [c for c in commands if c[1] == "rmi"] == [
        ["podman", "rmi", f"{repository}:old000000000"]
    ]


def test_no_go_is_an_error_naming_the_image(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(SimError, match=r"image exporters: .*no `go`"):
        images.ensure_cadvisor(print)

"""How the engine stand-in image is named, cached and built, without running Podman."""

from __future__ import annotations

import re
import resource
import shutil
from pathlib import Path
from subprocess import CompletedProcess

import pytest

from sparkrack.sim.images import RootfsRecipe
from sparkrack.sim.shell import SimError
from sparkrack.sim.standin import image

pytestmark = pytest.mark.unit


@pytest.fixture
def sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Copies of the Containerfile and the stand-in's modules that a test may change."""
    shutil.copy(image.CONTAINERFILE, tmp_path / "Containerfile")
    monkeypatch.setattr(image, "CONTAINERFILE", tmp_path / "Containerfile")
    for source in image.SOURCES:
        shutil.copy(source, tmp_path / source.name)
    monkeypatch.setattr(image, "SOURCES", tuple(tmp_path / s.name for s in image.SOURCES))
    return tmp_path


def test_the_key_changes_with_the_server_the_containerfile_and_the_base(
    sources: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = image.build_key()
    assert image.build_key() == original

    keys = set()
    for name in ("engine.py", "nccl.py", "Containerfile"):
        path = sources / name
        kept = path.read_text()
        path.write_text(kept + "\n# changed\n")
        keys.add(image.build_key())
        path.write_text(kept)
    monkeypatch.setattr(image, "BASE_RECIPE", RootfsRecipe(suite="trixie"))
    keys.add(image.build_key())

    assert len(keys | {original}) == 5


def test_ray_is_pinned_to_one_version() -> None:
    pins = re.findall(r'"ray==(\S+)"', image.CONTAINERFILE.read_text())

    assert len(pins) == 1 and re.fullmatch(r"\d+\.\d+\.\d+", pins[0])


def test_the_build_is_offline_but_for_pip_and_uses_runc(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PIP_CERT", image.__file__)  # any existing file stands in for a bundle

    args = image.podman_build_args("localhost/base:1", "localhost/x:2", "/ctx")

    joined = " ".join(args)
    for expected in ("--runtime runc", "--pull=never", "--network host", "--tag localhost/x:2"):
        assert expected in joined
    assert f"--secret id=host-ca,src={image.__file__}" in joined
    assert "--build-arg BASE=localhost/base:1" in joined
    assert args[-1] == "/ctx"


def test_ulimits_stay_at_or_below_this_machines_hard_limits() -> None:
    args = image.podman_ulimit_args()

    values = dict(a.split("=") for a in args[1::2])
    for name, limit in (("nofile", resource.RLIMIT_NOFILE), ("nproc", resource.RLIMIT_NPROC)):
        soft, hard = (int(v) for v in values[name].split(":"))
        assert soft == hard <= min(resource.getrlimit(limit)[1], image.ULIMIT_CEILING)


def test_pip_trusts_the_ca_bundle_the_host_is_told_to_use(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bundle = tmp_path / "proxy-ca.crt"
    bundle.write_text("-----BEGIN CERTIFICATE-----\n")
    for name in image.CA_BUNDLE_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SSL_CERT_FILE", str(bundle))
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(tmp_path / "missing.crt"))

    assert image.host_ca_bundle() == str(bundle)

    monkeypatch.delenv("SSL_CERT_FILE")
    monkeypatch.setattr(image, "DEBIAN_CA_BUNDLE", str(tmp_path / "none.crt"))
    with pytest.raises(SimError, match="no CA bundle for pip"):
        image.host_ca_bundle()


def test_an_existing_image_is_only_tagged_latest(monkeypatch: pytest.MonkeyPatch) -> None:
    commands: list[list[str]] = []
    monkeypatch.setattr(image, "podman_image_exists", lambda reference: True)
    monkeypatch.setattr(image, "run", lambda args, what: commands.append(list(args)))
    monkeypatch.setattr(image, "build_image", lambda *_: pytest.fail("built an existing image"))

    reference = image.ensure_standin_image(print)

    assert reference == f"localhost/sparkrack/engine-standin:{image.build_key()[:12]}"
    assert commands == [["podman", "tag", reference, "localhost/sparkrack/engine-standin:latest"]]


def test_a_missing_image_is_built_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[str] = []
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    (tmp_path / "sparkrack" / "images").mkdir(parents=True)
    monkeypatch.setattr(image, "podman_image_exists", lambda reference: reference in built)
    monkeypatch.setattr(image, "run", lambda args, what: None)
    monkeypatch.setattr(image, "build_image", lambda reference, progress: built.append(reference))
    monkeypatch.setattr(image, "remove_superseded", lambda reference: None)

    first = image.ensure_standin_image(print)
    second = image.ensure_standin_image(print)

    assert first == second and built == [first]


def test_build_output_shows_milestones_and_its_tail_on_failure() -> None:
    said: list[str] = []
    script = "echo 'STEP 2/6: RUN pip install'; echo 'pip noise'; echo 'ERROR: no ray'; exit 3"

    with pytest.raises(SimError) as failed:
        image.stream_build(["sh", "-c", script], said.append)

    assert said == ["image engine-standin: STEP 2/6: RUN pip install"]
    assert "exited" in str(failed.value) and "ERROR: no ray" in str(failed.value)


def test_a_new_build_removes_the_stand_ins_it_supersedes(monkeypatch: pytest.MonkeyPatch) -> None:
    current = f"{image.STANDIN_REPOSITORY}:new000000000"
    old = f"{image.STANDIN_REPOSITORY}:old000000000"
    listed = f"{current}\n{old}\n{image.LATEST}\n"
    commands: list[list[str]] = []

    def fake_run(args: list[str], what: str, check: bool = True) -> CompletedProcess[str]:
        commands.append(args)
        return CompletedProcess(args, 0, stdout=listed if args[1] == "images" else "")

    monkeypatch.setattr(image, "run", fake_run)

    image.remove_superseded(current)

    assert [c for c in commands if c[1] == "rmi"] == [["podman", "rmi", old]]


def test_the_containerfile_copies_every_source_the_key_is_made_of() -> None:
    """A source the key hashes but the image lacks fails only on a node, at the engine's import."""
    copy = next(
        line for line in image.CONTAINERFILE.read_text().splitlines() if line.startswith("COPY ")
    )

    assert copy.split()[1:-1] == list(image.SOURCE_NAMES)

"""Images change safely (issue 16, item 3): a new reference is brought in beside the old one, the
containers move to it, and only then does the old reference go, never with --force and never
taking an image a container still runs from; the head keeps no archive of the old reference.

The providers run against a fake node (ssh.run answered here); the program runs under Pulumi's
mocks, recording what the engine is told of each registration: its dependencies and whether it
asked to be deleted before it is replaced.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pulumi.runtime import settings as pulumi_settings
from pulumi.runtime.mocks import MockMonitor

from sparkrack.resources.base import NodeProvider
from sparkrack.resources.engine import ControlImageProvider
from sparkrack.resources.image_ship import ARCHIVE_DIR, archive_stem
from sparkrack.resources.podman import OriginImageProvider, ShippedImageProvider
from sparkrack.transport import ssh
from sparkrack.transport.target import Result, SshError, Target
from tests.program.harness import deployable_cluster, run_program

from .support import CONNECTION

pytestmark = pytest.mark.unit

OLD, NEW = "localhost/sparkrack/engine-standin:latest", "localhost/sparkrack/engine-standin:v2"
OLD_ID, OTHER_ID = "sha256:" + "a" * 64, "sha256:" + "b" * 64
CONTAINER_ID = "c" * 64
# What Podman 4 says, exit status 2, when `rmi` would take an image a container runs from.
IN_USE = (
    f"Error: image used by {CONTAINER_ID}: image is in use by a container: consider listing "
    "external containers and force-removing image\n"
)
SOURCE = {**CONNECTION, "to": "198.19.0.2", "key_name": "cluster_key"}
DESIRED: dict[type[NodeProvider], dict[str, Any]] = {
    OriginImageProvider: {"user": "sparkrack", "reference": OLD, "containerfile": "FROM x\n"},
    ShippedImageProvider: {
        "user": "sparkrack",
        "reference": OLD,
        "image_id": OLD_ID,
        "source": SOURCE,
    },
    ControlImageProvider: {"user": "sparkrack", "reference": OLD, "image_id": OLD_ID},
}
ANOTHER = {"reference": NEW, "user": "other", "node": "spark-3"}


class FakeNode:
    """ssh.run on one node's service user: its Podman has `image` under every reference, `rmi`
    answers `rmi`, and a container inspected by id is ray-head."""

    def __init__(self, image: str = OLD_ID, rmi: Result | None = None) -> None:
        self.image, self.rmi = image, rmi or Result("", "", 0)
        self.ran: list[str] = []

    def __call__(self, target: Target, line: str, **_: Any) -> Result:
        self.ran.append(line)
        if "podman image inspect" in line:
            return Result(f"{self.image}\n" if self.image else "", "", 0)
        if "podman rmi" in line:
            return self.rmi
        if "podman container inspect" in line:
            return Result(json.dumps([{"Name": "ray-head", "Id": CONTAINER_ID}]), "", 0)
        return Result("", "", 0)

    def podman_commands(self) -> list[list[str]]:
        """Each Podman command run, as its words (the script `as_user` wraps, split)."""
        scripts = [shlex.split(line)[-1] for line in self.ran]
        steps = [step for script in scripts for step in re.split(r"&&|\|\||;", script)]
        words = [shlex.split(step.replace("2>/dev/null", "")) for step in steps]
        return [command for command in words if command[:1] == ["podman"]]


@pytest.fixture
def node(monkeypatch: pytest.MonkeyPatch) -> FakeNode:
    fake = FakeNode()
    monkeypatch.setattr(ssh, "run", fake)
    return fake


def stored(provider_kind: type[NodeProvider], **changes: Any) -> dict[str, Any]:
    """What state holds for an image the provider made: its inputs, the id, what to restore."""
    props = {**CONNECTION, **DESIRED[provider_kind], "image_id": OLD_ID}
    return props | {"restore": {"had_image": False}} | changes


# --- the order: the new image first, the old one deleted after the containers moved ----------


@pytest.mark.parametrize("kind", list(DESIRED), ids=lambda kind: kind.__name__)
@pytest.mark.parametrize("key", ["reference", "user", "node"])
def test_another_image_is_created_before_the_old_one_is_deleted(
    kind: type[NodeProvider], key: str
) -> None:
    olds = {**CONNECTION, **DESIRED[kind]}
    diff = kind().diff("id", olds, {**olds, key: ANOTHER[key]})
    assert diff.replaces == [key]
    # Pulumi's default order: create the replacement, then, once the program is done (after the
    # containers that use it were updated), delete the replaced resource.
    assert diff.delete_before_replace is False


def test_another_containerfile_rebuilds_the_image_under_its_name(node: FakeNode) -> None:
    provider = OriginImageProvider()
    olds = stored(OriginImageProvider)
    news = {**CONNECTION, **DESIRED[OriginImageProvider], "containerfile": "FROM y\n"}
    assert provider.diff("id", olds, news).replaces is None  # an update: nothing is deleted
    result = provider.update("id", olds, news)
    builds = [c for c in node.podman_commands() if c[:2] == ["podman", "build"]]
    assert len(builds) == 1 and OLD in builds[0]
    assert not [c for c in node.podman_commands() if c[1] in ("rmi", "untag")]
    assert result.outs is not None and result.outs["restore"] == {"had_image": False}


# --- the delete: a reference goes, an image a container runs from never does -----------------


def test_the_old_reference_goes_without_force(node: FakeNode) -> None:
    ShippedImageProvider().delete("id", stored(ShippedImageProvider))
    assert node.podman_commands() == [
        ["podman", "image", "inspect", "--format", "{{.Id}}", OLD],
        ["podman", "rmi", "--ignore", OLD],
    ]


def test_an_image_a_container_runs_from_loses_only_its_name(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    node = FakeNode(rmi=Result("", IN_USE, 2))
    monkeypatch.setattr(ssh, "run", node)
    ControlImageProvider().delete("id", stored(ControlImageProvider))  # does not raise
    commands = node.podman_commands()
    assert ["podman", "untag", OLD_ID, OLD] in commands  # the name, and only this one
    assert not any("--force" in c or "-f" in c for c in commands)
    warning = capsys.readouterr().err
    assert warning.startswith("warning: node spark-2 (198.18.0.12): ")
    assert f"{OLD} untagged, its image kept: ray-head still runs it" in warning


def test_a_name_another_image_now_holds_is_left_to_it(monkeypatch: pytest.MonkeyPatch) -> None:
    node = FakeNode(image=OTHER_ID)
    monkeypatch.setattr(ssh, "run", node)
    OriginImageProvider().delete("id", stored(OriginImageProvider))
    assert [c[1] for c in node.podman_commands()] == ["image"]  # read, nothing removed


@pytest.mark.parametrize("kind", list(DESIRED), ids=lambda kind: kind.__name__)
def test_an_engine_image_replaced_stays_for_a_rollback_and_says_so(
    kind: type[NodeProvider], node: FakeNode, capsys: pytest.CaptureFixture[str]
) -> None:
    kind().delete("id", stored(kind, keep=True))
    assert node.podman_commands() == []  # no rmi, no untag: its archives alone go
    said = capsys.readouterr().err
    assert f"node spark-2 (198.18.0.12): kept image {OLD} for a rollback" in said
    assert "sparkrack images prune" in said


def test_an_image_there_before_sparkrack_is_kept(node: FakeNode) -> None:
    ShippedImageProvider().delete("id", stored(ShippedImageProvider, restore={"had_image": True}))
    assert node.podman_commands() == []


def test_an_image_already_gone_needs_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    node = FakeNode(image="")
    monkeypatch.setattr(ssh, "run", node)
    OriginImageProvider().delete("id", stored(OriginImageProvider))
    assert [c[1] for c in node.podman_commands()] == ["image"]


def test_any_other_refusal_fails_the_delete_naming_the_node(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(ssh, "run", FakeNode(rmi=Result("", "Error: storage is locked\n", 125)))
    with pytest.raises(SshError, match=r"spark-2 .*podman rmi --ignore .* exited 125: .*locked"):
        OriginImageProvider().delete("id", stored(OriginImageProvider))


# --- the archives shipping kept on the head --------------------------------------------------


def test_the_head_keeps_no_archive_of_the_old_reference(node: FakeNode, tmp_path: Path) -> None:
    archives = tmp_path / ARCHIVE_DIR
    archives.mkdir(parents=True)
    old, new = Path(archive_stem(OLD)).name, Path(archive_stem(NEW)).name
    new_files = [f"{new}@bbbbbbbbbbbb.tar", f"{new}.lock"]  # the new reference's, shipped
    for name in (f"{old}@aaaaaaaaaaaa.tar", f"{old}.lock", *new_files):
        (archives / name).write_text("x")
    ControlImageProvider().delete("id", stored(ControlImageProvider))
    # The first command the delete ran, the user's own script, run here by a real shell.
    script = shlex.split(node.ran[0])[-1]
    env = {"HOME": str(tmp_path), "PATH": os.environ["PATH"]}
    subprocess.run(["sh", "-c", script], cwd=tmp_path, env=env, check=True)
    assert sorted(path.name for path in archives.iterdir()) == sorted(new_files)


# --- the program: containers depend on their node's image, no image is deleted first ---------


@pytest.fixture
def registrations(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """name -> the RegisterResource request the program sent (and the URN it got), for sim-2."""
    seen: dict[str, Any] = {}
    register: Callable[..., Any] = MockMonitor.RegisterResource

    def recording(self: MockMonitor, request: Any) -> Any:
        response = register(self, request)
        seen[request.name] = {
            "type": request.type,
            "urn": response.urn,
            "dependencies": set(request.dependencies),
            "delete_before_replace": request.deleteBeforeReplace,
        }
        return response

    monkeypatch.setattr(MockMonitor, "RegisterResource", recording)
    monkeypatch.setattr(ssh, "unavailable", lambda targets, only_pinned=False: {})
    run_program("sim-2", deployable_cluster("sim-2"))
    yield seen
    pulumi_settings.reset_options()


ENGINE_CONTAINERS = {
    "spark-1-ray-head": "spark-1-engine-image",
    "spark-1-vllm": "spark-1-engine-image",
    "spark-2-ray-worker": "spark-2-engine-image",
}


@pytest.mark.program
def test_every_engine_container_depends_on_its_nodes_image(
    registrations: dict[str, Any],
) -> None:
    for container, image in ENGINE_CONTAINERS.items():
        assert registrations[image]["urn"] in registrations[container]["dependencies"], container
    # the worker's image comes from the head's: the old head image outlives the worker's
    head_image = registrations["spark-1-engine-image"]["urn"]
    assert head_image in registrations["spark-2-engine-image"]["dependencies"]


@pytest.mark.program
def test_every_container_depends_on_an_image_and_no_image_is_deleted_first(
    registrations: dict[str, Any],
) -> None:
    images = {r["urn"] for r in registrations.values() if r["type"].endswith("Image")}
    containers = [r for r in registrations.values() if r["type"].endswith(":Container")]
    assert len(images) >= 5 and len(containers) >= 5  # engine and monitoring, both nodes
    assert all(r["dependencies"] & images for r in containers)
    assert not any(r["delete_before_replace"] for r in registrations.values() if r["urn"] in images)

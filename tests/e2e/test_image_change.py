"""Images change safely (issue 16, item 3), through the real engine on a private copy of sim-2.

A second engine image is built here, under its own name and with an id of its own (the stand-in
with one label more), and the stack's `serving.engine.image` is changed to it. One rack serves the
module, each test starting where the last left it:

1. up from fresh nodes with the stand-in's `latest`;
2. the preview of the change orders it safely: each node's new image is created before its old
   one is deleted, and the old ones are deleted only after every engine container was updated;
3. `pulumi up`, while clients stream completions, succeeds with no failed step, drains the
   engine and cuts no admitted request; every engine container runs the new id and no container
   the old one; the old reference and its image stay on every node for a rollback, each node says
   so (until a prune: it keeps the newest earlier image of the engine's own repository, and this
   one is another repository's); the head keeps no archive of it (issue 31);
4. the engine serves the model again, from the new image;
5. a second up changes nothing;
6. a node that stops answering: up waits on nothing it needs and ends with its summary; back,
   one up heals.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sparkrack.config.load import load_stack_file
from sparkrack.plan import Plan, make_plan
from sparkrack.resources.image_ship import ARCHIVE_DIR, archive_stem
from sparkrack.sim import nodes
from sparkrack.sim.standin.image import LATEST
from sparkrack.sim.topology import SimTopology

from .conftest import SIM_API_KEY, PulumiProject
from .sim_fixtures import as_service, engine_rack, first_up, poll, ssh
from .traffic import Traffic

pytestmark = pytest.mark.e2e

STACK, PREFIX = "e2e-image", "198.18.24"
# Not the stand-in's own repository: ensure_standin_image drops its other tags after a rebuild.
NEXT = "localhost/sparkrack/engine-standin-next:v2"
UP_TIMEOUT_S = 1200
KEPT = "untagged, its image kept"  # the images' warning when a container still ran the old one
FAILED_STEP = re.compile(r"(creating|updating|deleting|replacing) failed|\*\*failed\*\*")
STATE: dict[str, Any] = {}


def local_id(reference: str) -> str:
    inspect = ["podman", "image", "inspect", "--format", "{{.Id}}", reference]
    return subprocess.run(inspect, capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture(scope="module")
def sim() -> Iterator[SimTopology]:
    yield from engine_rack("sim-2", STACK, PREFIX)


@pytest.fixture(scope="module")
def next_image(sim: SimTopology) -> Iterator[str]:
    """The second image here (image_source: control), removed from this machine at the end."""
    with tempfile.TemporaryDirectory() as context:
        containerfile = f"FROM {LATEST}\nLABEL sparkrack.e2e=image-change\n"
        (Path(context) / "Containerfile").write_text(containerfile)
        build = ["podman", "build", "-q", "--pull=never", "-t", NEXT, context]
        subprocess.run(build, capture_output=True, text=True, check=True, timeout=600)
    try:
        assert local_id(NEXT) != local_id(LATEST)
        yield local_id(NEXT)
    finally:
        subprocess.run(["podman", "rmi", "--ignore", NEXT], capture_output=True, check=False)


@pytest.fixture(scope="module")
def plan(project: PulumiProject, sim: SimTopology) -> Plan:
    """The rack's plan; the stack is written (and first deployed) by test 1."""
    return make_plan(load_stack_file(STACK, project.root / "stacks"))


def on_node(node: str, command: str) -> str:
    """`command` as the service user, whose Podman holds the images."""
    return ssh(STACK, node, as_service(command))


def image_on(node: str, reference: str) -> str:
    """The id the service user's Podman has under `reference`, '' without one."""
    inspect = f"podman image inspect --format '{{{{.Id}}}}' {reference} 2>/dev/null || true"
    return on_node(node, inspect)


def container_images(node: str) -> dict[str, str]:
    """Every container of the service user (any state): name -> image id."""
    listing = on_node(node, "podman ps -a --no-trunc --format '{{.Names}} {{.ImageID}}'")
    pairs = (line.split() for line in listing.splitlines() if line.strip())
    return {name: image.removeprefix("sha256:") for name, image in pairs}


def test_1_up_runs_the_first_image(project: PulumiProject, next_image: str) -> None:
    first_up(project, "sim-2", STACK, PREFIX, UP_TIMEOUT_S)
    old = local_id(LATEST)
    for node in ("spark-1", "spark-2"):
        assert image_on(node, LATEST) == old, node
    STATE["old"] = old


def preview_order(project: PulumiProject) -> list[tuple[str, str]]:
    """(operation, resource name) of every step the preview plans, in the engine's order."""
    steps = []
    for event in project.preview_events(STACK):
        meta = event.get("resourcePreEvent", {}).get("metadata")
        if meta and meta["op"] not in ("same", "refresh", "read"):
            steps.append((meta["op"], meta["urn"].rsplit("::", 1)[1]))
    return steps


def test_2_the_change_brings_the_new_image_in_before_the_old_goes(
    project: PulumiProject, plan: Plan
) -> None:
    project.edit_cluster(STACK, lambda cluster: cluster["serving"]["engine"].update(image=NEXT))
    steps = preview_order(project)
    position = {step: index for index, step in enumerate(steps)}  # the last of each
    updated = [
        position[("update", f"{node.name}-{name}")]
        for node in plan.nodes
        for name in (c.name for c in node.engine_containers)
    ]
    for node in plan.nodes:
        image = f"{node.name}-engine-image"
        created, deleted = (
            position[("create-replacement", image)],
            position[("delete-replaced", image)],
        )
        assert created < deleted, steps
        assert deleted > max(updated), steps  # after every engine container moved


def test_3_up_moves_every_container_drained_and_keeps_the_old_image_for_a_rollback(
    project: PulumiProject, plan: Plan, next_image: str
) -> None:
    old = STATE["old"]
    url = f"http://{plan.node(plan.head_node).address}:{plan.serving.port}"
    with Traffic(url, None) as traffic:
        # project.run fails the test on a non-zero exit, which any failed step makes
        args = ("up", "--stack", STACK, "--yes", "--skip-preview")
        done = project.run(*args, timeout=UP_TIMEOUT_S)
    output = done.stdout + done.stderr
    assert not FAILED_STEP.search(output) and KEPT not in output, output[-5000:]
    assert [a for a in traffic.streamed if a.outcome == "cut"] == []
    assert "engine stopped for the rollout: drained" in output
    for node in plan.nodes:
        assert image_on(node.name, NEXT) == next_image, node.name
        images = container_images(node.name)
        for name in (c.name for c in node.engine_containers):
            assert images[name] == next_image.removeprefix("sha256:"), (node.name, name)
        assert old.removeprefix("sha256:") not in images.values(), (node.name, images)
        assert image_on(node.name, LATEST) == old, node.name  # kept, under its name
    kept = re.findall(
        rf"node (\S+) \([^)]*\): kept image {re.escape(LATEST)} for a rollback", output
    )
    assert set(kept) == {node.name for node in plan.nodes}, output[-5000:]
    # The head's archives (the exporters image's too): none of the old engine reference left.
    archives = on_node(plan.head_node, f"ls -1 {ARCHIVE_DIR}").split()
    old_stem, new_stem = (Path(archive_stem(ref)).name for ref in (LATEST, NEXT))
    stale = [n for n in archives if n.startswith(f"{old_stem}@") or n == f"{old_stem}.lock"]
    assert not stale, archives
    assert len([n for n in archives if n.startswith(f"{new_stem}@")]) == 1, archives


def test_4_the_engine_serves_again_from_the_new_image(plan: Plan) -> None:
    head = plan.node(plan.head_node)
    url = f"http://{head.address}:{plan.serving.port}/v1/models"

    def models() -> str:
        asked = ["curl", "-sf", "-H", f"Authorization: Bearer {SIM_API_KEY}", url]
        return subprocess.run(asked, capture_output=True, text=True).stdout

    served = poll(models, lambda out: plan.serving.served_model_name in out, timeout=300)
    assert [m["id"] for m in json.loads(served)["data"]] == [plan.serving.served_model_name]


def test_5_a_second_up_changes_nothing(project: PulumiProject) -> None:
    again = ("up", "--stack", STACK, "--yes", "--expect-no-changes")
    assert project.run(*again, timeout=900).returncode == 0


def test_6_a_node_down_is_said_once_and_up_waits_on_nothing_it_needs(
    project: PulumiProject, sim: SimTopology, plan: Plan
) -> None:
    """spark-2's Ray worker stopped and its sshd with it (a box that froze: its ports still up,
    nothing answers): `up` converges the head, leaves the engine across the rack as it was (Ray's
    gates, the rollout and `vllm serve` stand still instead of waiting on a node that cannot
    join) and ends with its one-line summary, no traceback. sshd back, one `up` makes the rack
    whole and serving again, and a refreshing preview is quiet."""
    ssh(STACK, "spark-2", as_service("systemctl --user stop ray-worker"))
    container = nodes.container_name(STACK, "spark-2")
    sshd = ["podman", "exec", container, "systemctl"]
    subprocess.run([*sshd, "stop", "ssh.socket", "ssh.service"], check=True, capture_output=True)
    try:
        started = time.monotonic()
        failed = project.run("up", "--stack", STACK, "--yes", "--skip-preview", check=False)
        print(f"up with spark-2 down: {time.monotonic() - started:.0f} s")
        said = failed.stdout + failed.stderr
        assert failed.returncode != 0, said
        assert "1 node(s) left as they were: spark-2" in said, said[-3000:]
        assert "Traceback" not in said and "not ready after" not in said, said[-3000:]
    finally:
        subprocess.run([*sshd, "start", "ssh.service"], check=True, capture_output=True)
    project.run("up", "--stack", STACK, "--yes", "--skip-preview", timeout=UP_TIMEOUT_S)
    url = f"http://{plan.node(plan.head_node).address}:{plan.serving.port}/v1/models"
    key = shlex.quote(f"Authorization: Bearer {SIM_API_KEY}")
    assert plan.serving.served_model_name in ssh(STACK, plan.head_node, f"curl -sf -H {key} {url}")
    project.run("preview", "--stack", STACK, "--refresh", "--expect-no-changes", timeout=900)

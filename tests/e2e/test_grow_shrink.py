"""Day 2, a rack that grows and shrinks (issue 31, item 6), through the real engine on a private
simulated rack running programs/roles (the node roles; the engine's own rollouts are full2's):

1. two boxes on one cable (spark-1 port 0 to spark-2 port 1, seed 001's crossing), deployed;
2. a third box arrives and two cables close the ring: the preview's JSON creates everything of
   spark-3 and, on the two boxes there, only the links of the newly cabled ports and what names
   the rack's members (/etc/hosts, the cluster key's trust); one `up`, then nothing left to do;
3. spark-3, alive, leaves the stack with its cables: its model files stay, listed before and
   after, and it says so; then it comes back;
4. spark-3 dies (its container stopped) and leaves the stack with its cables: one `up` drops its
   resources from state with one line naming it, unplugs the others' ports from the ring, and
   ends with a clean state and nothing left to do; no `pulumi state delete`.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from sparkrack.sim import cluster as sim
from sparkrack.sim import nodes
from sparkrack.sim.topology import SimCable, SimNode, SimTopology

from .conftest import PulumiProject
from .programs import PROGRAMS
from .sim_fixtures import SERVICE_HOME, SERVICE_USER, private_cluster, require_host_tools, ssh
from .sim_fixtures import planned_changes as changes_in

pytestmark = pytest.mark.e2e

STACK, PREFIX = "e2e-grow", "198.18.10"
PROGRAM = PROGRAMS / "roles"  # the project fixture's program: the node roles, no inference
HALVES = (("enp1s0f0np0", "enp1s0f1np1"), ("enP2p1s0f0np0", "enP2p1s0f1np1"))  # port0, port1
TWO, THREE = ("spark-1", "spark-2"), ("spark-1", "spark-2", "spark-3")
ONE_CABLE = (("spark-1", "spark-2"),)  # from the first box's port 0 to the second's port 1
RING = (("spark-1", "spark-2"), ("spark-2", "spark-3"), ("spark-3", "spark-1"))


def topology(names: tuple[str, ...], cables: tuple[tuple[str, str], ...]) -> SimTopology:
    boxes = tuple(SimNode(name, f"{PREFIX}.1{name[-1]}") for name in names)
    wires = tuple(SimCable(a, port0, b, port1) for a, b in cables for port0, port1 in HALVES)
    return SimTopology(stack=STACK, nodes=boxes, cables=wires, mgmt_subnet=f"{PREFIX}.0/24")


def cluster(names: tuple[str, ...], cables: tuple[tuple[str, str], ...]) -> Any:
    config = private_cluster("sim-2", STACK, PREFIX)
    hardware = config["nodes"][0]["hardware"]
    config["nodes"] = [
        {"name": name, "address": f"{PREFIX}.1{name[-1]}", "hardware": hardware} for name in names
    ]
    config["fabric"]["cables"] = [{"a": f"{a}:port0", "b": f"{b}:port1"} for a, b in cables]
    tp = len(names) if len(names) == 2 else 1  # a ring of three pipelines across its boxes
    config["serving"] |= {"tensor_parallel_size": tp, "pipeline_parallel_size": len(names) // tp}
    return config


@pytest.fixture(scope="module")
def rack() -> Iterator[SimTopology]:
    """Two boxes on one cable, made fresh; at the end all three boxes' rack goes."""
    require_host_tools()
    everything = topology(THREE, RING)
    sim.down(everything, lambda line: None)
    try:
        first = topology(TWO, ONE_CABLE)
        assert sim.up(first, print).healthy
        yield first
    finally:
        sim.down(everything, print)


def preview_changes(project: PulumiProject) -> dict[str, tuple[str, list[str]]]:
    streaming = {"PULUMI_ENABLE_STREAMING_JSON_PREVIEW": "true"}
    done = project.run("preview", "--stack", STACK, "--refresh", "--json", extra_env=streaming)
    return changes_in(done.stdout)


def test_two_boxes_on_one_cable_deploy(rack: SimTopology, project: PulumiProject) -> None:
    project.write_stack(STACK, cluster(TWO, ONE_CABLE))
    project.run("stack", "init", STACK)
    project.run("up", "--stack", STACK, "--yes")
    project.run("preview", "--stack", STACK, "--expect-no-changes")


def test_a_third_box_creates_its_own_and_changes_only_membership_on_the_others(
    rack: SimTopology, project: PulumiProject
) -> None:
    assert sim.up(topology(THREE, RING), print).healthy
    project.write_stack(STACK, cluster(THREE, RING))

    changes = preview_changes(project)

    theirs = {name: step for name, step in changes.items() if name.startswith("spark-3-")}
    ours = {name: step for name, step in changes.items() if not name.startswith("spark-3-")}
    assert theirs and {op for op, _ in theirs.values()} == {"create"}, theirs
    assert ours == expected_on_the_first_two(), json.dumps(ours, indent=1)
    project.run("up", "--stack", STACK, "--yes")
    project.run("preview", "--stack", STACK, "--refresh", "--expect-no-changes")


def expected_on_the_first_two() -> dict[str, tuple[str, list[str]]]:
    """spark-1's port 1 and spark-2's port 0 are cabled now: their links are created and each
    box's fabric configuration lists them; both boxes name the new member in /etc/hosts; the
    head, which ships images and weights to every member, pins the newcomer's host key."""
    nothing: list[str] = []
    created = {
        f"{node}-{netdev}": ("create", nothing)
        for node, port in (("spark-1", 1), ("spark-2", 0))
        for netdev in (HALVES[0][port], HALVES[1][port])
    }
    both = {
        f"{node}-{what}": ("update", fields)
        for node in ("spark-1", "spark-2")
        for what, fields in (("hosts", ["block", "sha256"]), ("fabric-config", ["links"]))
    }
    head = {
        "spark-1-hostkeys-spark-3": ("create", nothing),
        "spark-1-known-hosts": ("update", ["block", "sha256"]),
    }
    return created | both | head


MODEL_DIR = f"{SERVICE_HOME}/.cache/huggingface"  # the default model dir (plan/paths.py)
MODEL_FILES = f"sudo find {MODEL_DIR} -type f -printf '%p %s\\n' | sort"


def test_a_live_box_leaves_the_stack_with_its_model_files(
    rack: SimTopology, project: PulumiProject
) -> None:
    """Removing a box that answers undoes sparkrack's work on it but keeps the service user's
    home, where the weights are: listed before and after."""
    shard = f"{MODEL_DIR}/hub/models--org--model/blobs/shard-0"
    put = f"sudo install -D -m 0644 -o {SERVICE_USER} /etc/hostname {shard}"
    ssh(STACK, "spark-3", f"{put} && sudo truncate -s 1M {shard}")
    before = ssh(STACK, "spark-3", MODEL_FILES)
    project.write_stack(STACK, cluster(TWO, ONE_CABLE))

    up = project.run("up", "--stack", STACK, "--yes")

    assert ssh(STACK, "spark-3", MODEL_FILES) == before and shard in before
    kept = [line for line in (up.stdout + up.stderr).splitlines() if "kept user" in line]
    assert kept and "spark-3" in kept[0], up.stdout + up.stderr
    project.run("preview", "--stack", STACK, "--refresh", "--expect-no-changes")
    project.write_stack(STACK, cluster(THREE, RING))  # back, for the next test to lose it
    project.run("up", "--stack", STACK, "--yes")


def test_a_dead_box_leaves_the_stack_in_one_up_with_one_line(
    rack: SimTopology, project: PulumiProject
) -> None:
    container = nodes.container_name(STACK, "spark-3")
    subprocess.run(["podman", "stop", "-t", "0", container], check=True, capture_output=True)
    project.write_stack(STACK, cluster(TWO, ONE_CABLE))

    up = project.run("up", "--stack", STACK, "--yes", "--refresh")

    output = up.stdout + up.stderr
    said = [line for line in output.splitlines() if "spark-3" in line]
    dropped = {line[line.index("node spark-3") :] for line in said if "dropped from" in line}
    assert len(dropped) == 1, output
    assert next(iter(dropped)).endswith(
        "its resources are dropped from the stack's state; whatever sparkrack put on it stays there"
    )
    exported = project.run("stack", "export", "--stack", STACK).stdout
    assert "spark-3" not in exported
    project.run("preview", "--stack", STACK, "--refresh", "--expect-no-changes")

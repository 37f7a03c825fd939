"""What the weights e2e modules (test_weights_sim, test_weights_sim16) share: a private rack's
stack split into pipeline stages with `serving.weights` naming a checkpoint on the head, the
project running the weights program, and the reads they check against: files and hashes in a
directory, bytes sent over a node's fabric ports, the schedule's own byte count, and what a
refreshing preview would change.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sparkrack.config.load import spec_from_config
from sparkrack.plan import NodePlan, Plan, make_plan
from sparkrack.plan.weights import ship_tree
from sparkrack.text.checkpoint_index import INDEX_FILE
from tests.weights_schedule import Transfer, tree_schedule

from .conftest import REPO, PulumiProject, make_project
from .programs import PROGRAMS
from .programs.weights.checkpoint import make_command
from .sim_fixtures import SERVICE_HOME, planned_changes, private_cluster, ssh

# On the head, named by `serving.weights`: the owner's directory (made before `up` made the service
# user), which the service user reads.
CHECKPOINT = "/srv/sparkrack-ckpt"
MODEL_DIR = f"{SERVICE_HOME}/.cache/huggingface"  # the inference role's default, in its home
# each node's share, where ModelWeights puts it (the shipped stacks' model)
SNAPSHOT = MODEL_DIR + "/hub/models--{repo}/snapshots/main"
NOT_SHARDS = frozenset({"config.json", INDEX_FILE})  # every node gets these


def stage_cluster(shipped: str, stack: str, prefix: str, tp: int, pp: int) -> Any:
    """The shipped rack's private config, split TP x PP, shipping the head's CHECKPOINT."""
    config = private_cluster(shipped, stack, prefix)
    config["serving"] |= {"pipeline_parallel_size": pp, "tensor_parallel_size": tp}
    config["serving"]["weights"] = {"source": "directory", "directory": CHECKPOINT}
    return config


def stack_plan(stack: str, config: Any) -> Plan:
    return make_plan(spec_from_config(stack, config, base_dir=REPO / "stacks"))


def snapshot(plan: Plan) -> str:
    return SNAPSHOT.format(repo=plan.serving.model.replace("/", "--"))


def weights_project(base: Path, stack: str, config: Any) -> PulumiProject:
    """A project running programs/weights, with the stack written and initialized."""
    project = make_project(base, PROGRAMS / "weights")
    project.write_stack(stack, config)
    project.run("stack", "init", stack)
    return project


def checkpoint_command(layers: int, shards: int, shard_bytes: int) -> str:
    """The owner's command that writes the synthetic checkpoint into CHECKPOINT (prints its
    weight_map)."""
    place = f'sudo install -d -m 0755 -o "$(id -un)" {CHECKPOINT}'
    return f"{place} && {make_command(CHECKPOINT, layers, shards, shard_bytes)}"


def make_checkpoint(stack: str, head: str, layers: int, shards: int, shard_bytes: int) -> Any:
    """The synthetic checkpoint written on the head; returns its weight_map."""
    return json.loads(ssh(stack, head, checkpoint_command(layers, shards, shard_bytes)))


def listing(stack: str, node: str, directory: str) -> dict[str, str]:
    """name -> sha256 of the files in `directory` on the node ({} without it)."""
    read = f"cd {directory} && sha256sum -- * 2>/dev/null || true"
    out = ssh(stack, node, f"sudo sh -c {shlex.quote(read)}")  # the service user's home: 0700
    return {name: digest for digest, name in (line.split("  ", 1) for line in out.splitlines())}


def sizes(stack: str, node: str, directory: str) -> dict[str, int]:
    """name -> size in bytes of the files in `directory` on the node."""
    read = f"cd {directory} && stat -c '%s %n' -- *"
    out = ssh(stack, node, f"sudo sh -c {shlex.quote(read)}")
    return {name: int(size) for size, name in (line.split(" ", 1) for line in out.splitlines())}


def fabric_tx(stack: str, node: NodePlan) -> int:
    """Bytes the node has sent over its fabric ports so far (addressed by the Plan or by DHCP)."""
    netdevs = [link.netdev for link in node.links]
    paths = " ".join(f"/sys/class/net/{netdev}/statistics/tx_bytes" for netdev in netdevs)
    return sum(int(value) for value in ssh(stack, node.name, f"cat {paths}").split())


def schedule(plan: Plan, needs: Mapping[str, frozenset[str]]) -> list[Transfer]:
    """The plan's shipping tree's transfers for these needs (non-shard files included)."""
    head = plan.head_node
    return tree_schedule(needs, ship_tree(plan.layout, head), head)


def sent_by(transfers: list[Transfer], files: Mapping[str, int]) -> dict[str, int]:
    """source node -> the bytes the schedule has it send."""
    found: dict[str, int] = {}
    for transfer in transfers:
        found[transfer.source] = found.get(transfer.source, 0) + files[transfer.shard]
    return found


FRAMING_SLACK = 2**18  # bytes: a little other traffic (neighbour discovery, SSH handshakes)


def within_framing(sent: int, counted: int) -> bool:
    """`sent` is `counted` bytes of files and their framing: TCP/IP headers (3.6% at a
    1500-byte MTU, 3-4% measured here) and SSH's packets, and never whole files besides."""
    return counted <= sent <= counted * 1.05 + FRAMING_SLACK


def expect_clean(project: PulumiProject, stack: str) -> None:
    project.run("preview", "--stack", stack, "--refresh", "--expect-no-changes", timeout=900)


def refreshing_changes(project: PulumiProject, stack: str) -> dict[str, tuple[str, list[str]]]:
    streaming = {"PULUMI_ENABLE_STREAMING_JSON_PREVIEW": "true"}
    done = project.run(
        "preview", "--stack", stack, "--refresh", "--json", extra_env=streaming, timeout=900
    )
    return planned_changes(done.stdout)

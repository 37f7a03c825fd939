"""`sparkrack images|weights list|prune`: what every node's service user holds, judged against
the Plan, and the removal of what nothing needs, only when asked (issue 31).

Nothing the Plan names is ever removed: its engine and monitoring images, an image a container
was made from, its model's repository in the Hugging Face cache. The newest other image of the
engine's repository is kept too, for a rollback (`serving.engine.image` set back moves nothing).
The rest is `unreferenced`: listed always, removed by `prune --yes` only; `prune` alone is a dry
run that says what it would remove.
"""

from __future__ import annotations

import posixpath
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from sparkrack.asking import gather
from sparkrack.facts.podman import StoredImage, images
from sparkrack.facts.users import account
from sparkrack.facts.weights import model_repos
from sparkrack.ops.doctor.gather import fan_out
from sparkrack.plan import NodePlan, Plan
from sparkrack.plan.weights import hf_cache_repo
from sparkrack.text.byte_units import decimal_bytes
from sparkrack.text.commands import as_user
from sparkrack.text.table import table
from sparkrack.transport import ssh
from sparkrack.transport.target import Target

Kind = Literal["images", "weights"]
KEPT = ("planned", "in use", "rollback")  # verdicts prune never touches
UNREFERENCED = "unreferenced"


@dataclass(frozen=True)
class Held:
    """One thing a node's service user holds, and why it stays or may go."""

    node: str
    name: str  # the image's references, or the repository's directory
    ident: str  # the image id, or the directory's path: what prune removes
    size: int
    verdict: str  # one of KEPT, or UNREFERENCED


def repository(reference: str) -> str:
    """'registry/name:tag' -> 'registry/name' (a port's colon before the last slash stays)."""
    head, _, last = reference.rpartition("/")
    return posixpath.join(head, last.partition(":")[0]) if head else last.partition(":")[0]


def planned_images(plan: Plan) -> frozenset[str]:
    monitoring = plan.monitoring
    named = (monitoring.exporters_image, monitoring.prometheus_image, monitoring.grafana_image)
    return frozenset({plan.serving.image, *(ref for ref in named if ref)})


def judge_images(node: str, stored: Sequence[StoredImage], plan: Plan) -> list[Held]:
    """Each image with its verdict; `stored` newest first, as the fact reads it."""
    planned, engine = planned_images(plan), repository(plan.serving.image)
    rollback_left, judged = True, []
    for image in stored:
        verdict = UNREFERENCED
        if planned & set(image.names):
            verdict = "planned"
        elif image.containers:
            verdict = "in use"
        elif rollback_left and any(repository(name) == engine for name in image.names):
            verdict, rollback_left = "rollback", False
        name = ", ".join(image.names) or "<untagged>"
        judged.append(Held(node, name, image.id, image.size, verdict))
    return judged


def judge_weights(node: NodePlan, repos: dict[str, int], plan: Plan) -> list[Held]:
    """Each model repository in the node's cache; the Plan's model is the one planned."""
    wanted = hf_cache_repo(node.paths.model_dir, plan.serving.model)
    return [
        Held(node.name, posixpath.basename(path), path, size, _weights_verdict(path, wanted))
        for path, size in sorted(repos.items())
    ]


def _weights_verdict(path: str, wanted: str) -> str:
    return "planned" if path == wanted else UNREFERENCED


def read_node(plan: Plan, node: NodePlan, kind: Kind) -> list[Held]:
    """What the node's service user holds; nothing before `up` has made that user."""
    target, user = Target.for_node(node), plan.roles.base.service_user.name
    if gather(target, account(user)) is None:
        return []
    if kind == "images":
        stored = gather(target, images().as_user(user))
        return judge_images(node.name, stored, plan)
    repos = gather(target, model_repos(node.paths.model_dir).as_user(user))
    return judge_weights(node, repos, plan)


def gather_holdings(plan: Plan, kind: Kind) -> tuple[list[Held], dict[str, str]]:
    """Every node at once: (what they hold, node -> why it could not be read)."""
    names = [node.name for node in plan.nodes]
    found, errors = fan_out(names, lambda name: read_node(plan, plan.node(name), kind))
    return [item for name in names for item in found.get(name, [])], errors


def removal(kind: Kind, items: Sequence[Held]) -> str:
    """The service user's command that removes `items` (all of one node)."""
    idents = [item.ident for item in items]
    if kind == "images":
        return shlex.join(["podman", "rmi", "--", *idents])
    return shlex.join(["rm", "-rf", "--", *idents])


def prune(plan: Plan, kind: Kind, held: Sequence[Held]) -> dict[str, str]:
    """Remove every unreferenced item on its node: node -> why it could not, per node."""
    user = plan.roles.base.service_user.name
    doomed: dict[str, list[Held]] = {}
    for item in held:
        if item.verdict not in KEPT:
            doomed.setdefault(item.node, []).append(item)

    def remove(name: str) -> None:
        target = Target.for_node(plan.node(name))
        ssh.run(target, as_user(user, removal(kind, doomed[name])))

    return fan_out(list(doomed), remove)[1]


def render(kind: Kind, stack: str, held: Sequence[Held], action: str) -> str:
    """The table of what is held, and what `action` (listed, would remove, removed) did."""
    rows = [
        (item.node, item.verdict, decimal_bytes(item.size), item.name, _short(item.ident))
        for item in held
    ]
    gone = [item for item in held if item.verdict not in KEPT]
    title = f"sparkrack {kind}: stack {stack}"
    lines = [title, *table(rows, ("node", "verdict", "size", "name", "id / path"))]
    total = decimal_bytes(sum(item.size for item in gone))
    lines.append(f"{len(gone)} unreferenced ({total}): {action}")
    return "\n".join(lines)


def _short(ident: str) -> str:
    return ident[:12] if "/" not in ident else ident

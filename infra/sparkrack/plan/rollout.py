"""What a change does to a deployed rack, said before `up` (issue 31's blast radius): per node,
which engine containers restart, start or stop, and how many weight bytes move onto it; whether
serving stops, for how long the drain may hold it and how long the last rollout kept it down.

Pure: the deployed side is the footprint the program exported at its last `up` (`engine`), the
planned side the same footprint of the Plan about to be deployed. What neither shows: an image
rebuilt under the same reference (a new id, found by `up` when it reads the head), and the
monitoring containers, which restart without stopping serving.
"""

from __future__ import annotations

from sparkrack.plan.model import Plan, canonical_digest
from sparkrack.stackspec import StrictModel


class Footprint(StrictModel):
    """A Plan's engine, as the program exports it after `up`."""

    model: str
    revision: str
    image: str
    containers: dict[str, dict[str, str]]  # node -> engine container -> sha256 of its spec
    weight_bytes: dict[str, int]  # node -> the checkpoint bytes it holds (its stage's share)


class NodeRadius(StrictModel):
    node: str
    restarts: tuple[str, ...]  # changed: drained (the API) or stopped, then started again
    starts: tuple[str, ...]  # new on the node (a node added, or a container)
    stops: tuple[str, ...]  # gone from the Plan: stopped and removed
    weight_bytes: int  # what moves onto the node before the restart (0: nothing)


class BlastRadius(StrictModel):
    stack: str
    nodes: tuple[NodeRadius, ...]
    model: tuple[str, str]  # deployed, planned: <repo>@<revision>
    image: tuple[str, str]
    serving_stops: bool
    drain_timeout_s: int  # the longest the requests in flight may hold the restart
    last_downtime_s: float | None  # the last rollout's, measured by `up`; None: none yet


def node_weight_bytes(plan: Plan) -> int:
    """A node's share of the checkpoint: its stage's, where staging ships by layer."""
    weights, stages = plan.serving.weights, plan.layout.pipeline_parallel_size
    share = stages if weights is not None and weights.layer_aware and stages > 1 else 1
    return -(-plan.fit.weight_bytes // share)


def footprint(plan: Plan) -> Footprint:
    containers = {
        node.name: {
            spec.name: canonical_digest(spec.model_dump(mode="json"))
            for spec in node.engine_containers
        }
        for node in plan.nodes
    }
    share = node_weight_bytes(plan)
    return Footprint(
        model=plan.serving.model,
        revision=plan.serving.revision,
        image=plan.serving.image,
        containers=containers,
        weight_bytes={node.name: share for node in plan.nodes},
    )


def engine_digest(plan: Plan) -> str:
    """Every engine container of every node as planned, as one value: it changes with any
    change that restarts one of them (a flag, an env value, a limit, a revision)."""
    return canonical_digest(footprint(plan).containers)


def node_radius(name: str, deployed: Footprint, planned: Footprint) -> NodeRadius:
    was, will = deployed.containers.get(name, {}), planned.containers.get(name, {})
    same_model = (deployed.model, deployed.revision) == (planned.model, planned.revision)
    moves = 0 if same_model and name in deployed.containers else planned.weight_bytes.get(name, 0)
    return NodeRadius(
        node=name,
        restarts=tuple(c for c in will if c in was and was[c] != will[c]),
        starts=tuple(c for c in will if c not in was),
        stops=tuple(c for c in was if c not in will),
        weight_bytes=moves,
    )


def blast_radius(
    plan: Plan, deployed: Footprint, last_downtime_s: float | None = None
) -> BlastRadius:
    planned = footprint(plan)
    names = [*planned.containers, *(n for n in deployed.containers if n not in planned.containers)]
    nodes = tuple(node_radius(name, deployed, planned) for name in names)
    return BlastRadius(
        stack=plan.stack,
        nodes=nodes,
        model=(f"{deployed.model}@{deployed.revision}", f"{planned.model}@{planned.revision}"),
        image=(deployed.image, planned.image),
        serving_stops=any(n.restarts or n.starts or n.stops for n in nodes),
        drain_timeout_s=plan.serving.drain_timeout_s,
        last_downtime_s=last_downtime_s,
    )

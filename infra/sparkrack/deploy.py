"""The one wiring of the roles: a Plan in, every node's roles out, in the order that works.

`infra/__main__.py` and every end-to-end program deploy through `deploy`, so that what the tests
bring up is what a user's `pulumi up` brings up; a program chooses only which roles (the Plan's,
`Plan.deploying`), which secrets it hands in and whether `up` ends with verification (the weights
e2e program then adds each node's model store on `Deployed.nodes`). Nothing here reads config or a
node: the program loads the Plan and the secrets, the roles turn Plan parts into resources. The
Plan deployed is exported whole (PLAN_OUTPUT), for `sparkrack verify --stack`.

The order, and why:
- the head first: its public key is what the other nodes authorize, and the engine and
  exporter images of the workers come from it with that key;
- on each node base, then fabric, CPU pinning and Podman beside each other;
- the engine after its node's roles and the head's trust (a worker's Ray joins the head's);
  `vllm serve` after every node's engine;
- monitoring beside inference, never after it: an engine that will not start is what it must
  show; Prometheus after the head's exporters;
- last, on `up`, a step that fails naming any node this run could not use, and (with every
  node there) the verification of the Plan just deployed, handed to it on its stdin.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pulumi

from roles.base.role import Base, BaseArgs
from roles.cpu_pinning.role import CpuPinning, CpuPinningArgs
from roles.fabric.role import Fabric, FabricArgs
from roles.inference.role import (
    Inference,
    InferenceArgs,
    InferenceServe,
    InferenceServeArgs,
)
from roles.monitoring.role import (
    Monitoring,
    MonitoringArgs,
    MonitoringServer,
    MonitoringServerArgs,
)
from roles.podman.role import Podman, PodmanArgs
from sparkrack.ops.deployed import ENGINE_IMAGE_OUTPUT, PLAN_OUTPUT
from sparkrack.plan import NodePlan, Plan
from sparkrack.resources.availability import fail_after, say_unavailable
from sparkrack.resources.engine import ServedModel
from sparkrack.resources.verification import verification
from sparkrack.transport.target import Target


@dataclass(frozen=True)
class Secrets:
    """What the program read as Pulumi secrets, handed to the roles that need them."""

    hf_token: pulumi.Input[str] | None = None
    grafana_password: pulumi.Input[str] | None = None
    api_key: pulumi.Input[str] | None = None


@dataclass
class Deployed:
    """What the program exports or a test reads: the resources, by role and node."""

    unavailable: dict[str, str]
    resources: list[pulumi.Resource] = field(default_factory=list)
    exports: dict[str, dict[str, Any]] = field(default_factory=dict)
    served: ServedModel | None = None  # the engine's API, when the inference role runs
    # The engine image's id as the head holds it: what verification holds every node to.
    engine_image_id: pulumi.Output[str] | None = None
    nodes: list[NodeRoles] = field(default_factory=list)  # each node's roles, the head's first


@dataclass
class NodeRoles:
    """One node's roles below the engine: what its engine and exporters wait for."""

    node: NodePlan
    target: Target  # how the program reaches it (node_targets)
    base: Base
    after: list[pulumi.Resource]


def deploy(
    plan: Plan,
    secrets: Secrets | None = None,
    verify: bool = False,
) -> Deployed:
    """Every node's roles of the Plan (`plan.deploys`); see the module docstring for the order."""
    roles, secrets = plan.deploys, secrets or Secrets()
    # The Plan as JSON holds no secret (those are Pulumi secrets, handed in apart: `secrets`).
    plan_json = plan.model_dump_json()
    pulumi.export(PLAN_OUTPUT, plan_json)
    targets = node_targets(plan)
    # A node that does not answer, or offers another host key, is said once and left alone.
    deployed = Deployed(say_unavailable(targets.values()))
    below: list[NodeRoles] = []
    for node in head_first(plan):
        head_key = below[0].base.public_key if below else None
        below.append(node_roles(node, plan, targets, head_key, deployed))
        deployed.resources += below[-1].after
    deployed.nodes = below
    if "inference" in roles:
        standing = rack_not_whole(deployed.unavailable)
        engines, deployed.served = inference(plan, below, secrets, standing)
        deployed.resources += engines
        deployed.engine_image_id = head_image_id(engines)
        if deployed.engine_image_id is not None:
            pulumi.export(ENGINE_IMAGE_OUTPUT, deployed.engine_image_id)
    if "monitoring" in roles and plan.monitoring.enabled:
        deployed.resources += monitoring(plan, below, secrets)
    fail_after(deployed.unavailable, deployed.resources)
    if verify and not deployed.unavailable:
        # With a node left alone there is nothing whole to verify: the check stays pending and
        # so runs at the next `up` that reaches every node.
        after_all = pulumi.ResourceOptions(depends_on=deployed.resources)
        handed = (plan_json, deployed.engine_image_id)
        verification("verify", plan.stack, plan.digest(), handed, after_all)
    return deployed


def head_image_id(engines: list[pulumi.Resource]) -> pulumi.Output[str] | None:
    """The head's engine image id: the first engine's (the head's is made first)."""
    heads = [engine.image.image_id for engine in engines if isinstance(engine, Inference)]
    return heads[0] if heads else None


def node_targets(plan: Plan) -> dict[str, Target]:
    """How the program reaches each node, by name: made here once per node, from the Plan's
    SSH settings, and handed to the roles."""
    return {node.name: Target.for_node(node) for node in plan.nodes}


def head_first(plan: Plan) -> list[NodePlan]:
    return sorted(plan.nodes, key=lambda node: node.name != plan.head_node)


def node_roles(
    node: NodePlan,
    plan: Plan,
    targets: dict[str, Target],
    head_key: pulumi.Output[str] | None,
    deployed: Deployed,
) -> NodeRoles:
    """Base (trusting the head's key), then the Plan's other node roles, beside each other."""
    roles, target = plan.deploys, targets[node.name]
    base = Base(f"{node.name}-base", BaseArgs(plan, node, targets, head_key))
    after_base = pulumi.ResourceOptions(depends_on=[base])
    exports: dict[str, Any] = {}
    after: list[pulumi.Resource] = [base, base.trust]
    if "fabric" in roles:
        fabric_args = FabricArgs(node, target, plan.roles.fabric)
        fabric = Fabric(f"{node.name}-fabric", fabric_args, after_base)
        exports["fabric"] = fabric.netdevs
        after.append(fabric)
    if "cpu_pinning" in roles:
        pinning_args = CpuPinningArgs(node, target, plan.roles.cpu_pinning)
        pinning = CpuPinning(f"{node.name}-cpu-pinning", pinning_args, after_base)
        exports["compute_cpuset"] = pinning.compute_cpuset
        after.append(pinning)
    if "podman" in roles:
        podman_args = PodmanArgs(node, target, base.user, base.home, plan.roles.podman)
        podman = Podman(f"{node.name}-podman", podman_args, after_base)
        exports["podman_runtime"] = podman.runtime
        after.append(podman)
    deployed.exports[node.name] = exports
    return NodeRoles(node, target, base, after)


def after_head_trust(nodes: NodeRoles, head: NodeRoles) -> pulumi.ResourceOptions:
    return pulumi.ResourceOptions(depends_on=[*nodes.after, head.base.trust])


def rack_not_whole(unavailable: dict[str, str]) -> str:
    """Why the engine across the rack stands still this run ("" when every node answers): its
    gates would wait for a node that cannot join, its rollout would stop an engine that cannot
    come back."""
    if not unavailable:
        return ""
    return f"the engine is left as it was: {', '.join(sorted(unavailable))} does not answer"


def inference(
    plan: Plan, below: list[NodeRoles], secrets: Secrets, standing: str = ""
) -> tuple[list[pulumi.Resource], ServedModel | None]:
    """An engine on every node, the head's first; `vllm serve` once every engine is there.
    Returns them, and the API's readiness (its outputs: the last rollout's downtime). With
    `standing`, what spans the rack (Ray's gates, the rollout, `vllm serve`) stands still."""
    head_engine: Inference | None = None
    engines: list[Inference] = []
    for nodes in below:
        node, base = nodes.node, nodes.base
        args = InferenceArgs(
            plan, node, nodes.target, base.user, base.home, head_engine, secrets.hf_token, standing
        )
        engine = Inference(f"{node.name}-inference", args, after_head_trust(nodes, below[0]))
        head_engine = head_engine or engine
        engines.append(engine)
    if head_engine is None:
        return [], None
    # Every node's image and weights first, then the drain, then the engine's restart.
    rollout = head_engine.rollout(plan, engines)
    for engine in engines:
        engine.start(plan, rollout)
    serve_args = InferenceServeArgs(plan, head_engine, rollout, standing, secrets.api_key)
    after_engines = pulumi.ResourceOptions(depends_on=list(engines))
    serve = InferenceServe(f"{plan.head_node}-inference-serve", serve_args, after_engines)
    return [*engines, serve], serve.served


def monitoring(plan: Plan, below: list[NodeRoles], secrets: Secrets) -> list[pulumi.Resource]:
    """The exporters on every node, the head's first; Prometheus after the head's."""
    head_monitor: Monitoring | None = None
    monitors: list[pulumi.Resource] = []
    for nodes in below:
        node, base = nodes.node, nodes.base
        args = MonitoringArgs(plan, node, nodes.target, base.user, base.home, head_monitor)
        monitor = Monitoring(f"{node.name}-monitoring", args, after_head_trust(nodes, below[0]))
        head_monitor = head_monitor or monitor
        monitors.append(monitor)
    server = plan.monitoring.prometheus_node
    on_server = next(nodes for nodes in below if nodes.node.name == server)
    user, home = on_server.base.user, on_server.base.home
    server_args = MonitoringServerArgs(plan, on_server.target, user, home, secrets.grafana_password)
    after_exporters = pulumi.ResourceOptions(depends_on=monitors[:1])
    monitors.append(MonitoringServer(f"{server}-monitoring-server", server_args, after_exporters))
    return monitors

"""The inference role: the engine image, the model directory and a Ray container on every node;
`vllm serve` beside the head's Ray once every node has joined.

The model dir and the staged weights in it are roles/inference/weights.py's (ModelWeights).

Inference (one per node) gets the image to the node: on the head it is built, found or loaded
from this machine as the stack's `serving.engine.source` says (a build from the plan's
Containerfile); every other node gets it from the
head over the fabric. The head's Ray must be up (read from Ray, never slept for) before a worker
starts; with `serving.ray_join_batch`, each wave of workers waits for the last to have joined.
InferenceServe (the head only) waits for all nodes in Ray, runs `vllm serve`, and waits for the
OpenAI API to list the model.

A change reaches the engine in one order (issue 31): every node's image and weights first, while
the old engine serves; then the head's EngineRollout drains it (vLLM admits nothing new and
finishes what is in flight); then the containers that changed restart, Ray's first, and the wait
for the model says how long nothing served. So Inference is built in two steps: `__init__`
prepares the node, `start` runs its Ray after the rollout.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, replace

import pulumi

from roles.common import ship_from_head, token
from roles.containers import RunAs, container
from roles.inference.weights import ModelWeights, ModelWeightsArgs, model_store
from sparkrack.plan import NodePlan, Plan
from sparkrack.plan.engine import API_CONTAINER, HEAD_CONTAINER
from sparkrack.plan.fence import FENCE_TABLE
from sparkrack.plan.rollout import engine_digest
from sparkrack.resources.engine import (
    ControlImage,
    Directory,
    EngineRollout,
    EngineRolloutArgs,
    RayCluster,
    RayClusterArgs,
    ServedModel,
    ServedModelArgs,
)
from sparkrack.resources.engine_transport import EngineTransport, EngineTransportArgs
from sparkrack.resources.files import sha256_of
from sparkrack.resources.firewall import NftTable, NftTableArgs
from sparkrack.resources.podman import Container, Image, ImageArgs
from sparkrack.resources.podman_secret import PodmanSecret
from sparkrack.text.addresses import http_url
from sparkrack.transport.target import Target

ROLE = "inference"


@dataclass(frozen=True)
class InferenceArgs:
    plan: Plan
    node: NodePlan
    target: Target  # how the program reaches the node
    user: str
    home: str
    head: Inference | None = None  # None on the head: its image and Ray are the others' origin
    hf_token: pulumi.Input[str] | None = None  # for a download of the staged weights
    standing: str = ""  # why what spans the rack stands still this run (deploy.rack_not_whole)


class Inference(pulumi.ComponentResource):
    """One node's engine. Outputs: image_id; on the head, `head_ready` gates the workers."""

    image: Image
    ray: Container
    head_ready: RayCluster | None
    weights: ModelWeights | None

    def __init__(
        self, name: str, args: InferenceArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(token(ROLE), name, None, opts)
        plan, node, head, target = args.plan, args.node, args.head, args.target
        self.target, self.user, self.head_ready = target, args.user, None
        self.run_as = RunAs(target, args.user, args.home)
        # The head's gates and rollout span the rack: they stand still while it is not whole.
        self.rack_target = target.standing_still(args.standing)
        self.image = self.engine_image(plan, node, head)
        head_weights = head.weights if head is not None else None
        weights = ModelWeightsArgs(plan, node, target, args.user, head_weights, args.hf_token)
        store = model_store(weights, pulumi.ResourceOptions(parent=self))
        self.weights = store.weights
        after: list[pulumi.Resource] = [self.image, store.directory, self.fence(node, target)]
        after += [self.weights] if self.weights is not None else []
        if node.role == "head":
            after += self.head_directories(node)
        self.prepared, self.node, self.head = after, node, head
        self.register_outputs({"image_id": self.image.image_id})

    def head_directories(self, node: NodePlan) -> list[Directory]:
        """Ray's session directory, shared with the vLLM container, and the engine log's."""
        child, user = pulumi.ResourceOptions(parent=self), self.user
        log_dir = posixpath.dirname(node.paths.engine_log)
        return [
            Directory(f"{node.name}-ray-dir", self.target, node.paths.ray_dir, user, opts=child),
            Directory(f"{node.name}-engine-log", self.target, log_dir, user, opts=child),
        ]

    def start(self, plan: Plan, rollout: EngineRollout) -> None:
        """The node's Ray, once every node has what the change brings (images, weights) and the
        serving engine has drained (the rollout): the head's first, each worker after its gate."""
        node, head = self.node, self.head
        after = [*self.prepared, rollout]
        if head is not None:
            after.append(head.join_gate(plan, node.name))
        ray = node.engine_containers[0]  # the Plan's: Ray first, on every node
        opts = pulumi.ResourceOptions(parent=self, depends_on=after)
        self.ray = container(ray, self.run_as, self.image.image_id, opts)
        if node.role == "head":
            ready = RayClusterArgs(self.target, self.user, HEAD_CONTAINER, 1, self.ray.image_id)
            self.head_ready = RayCluster(
                f"{node.name}-ray-head-ready",
                ready,
                pulumi.ResourceOptions(parent=self, depends_on=[self.ray]),
            )
            self.gates: dict[int, RayCluster] = {0: self.head_ready}
            self.workers: dict[str, Container] = {}
        elif head is not None:
            head.workers[node.name] = self.ray

    def rollout(self, plan: Plan, engines: list[Inference]) -> EngineRollout:
        """On the head: the drain before a change restarts the engine, once every node has the
        change's image and weights, so that the old engine serves while they move."""
        node = plan.node(plan.head_node)
        generation = pulumi.Output.concat(self.image.image_id, " ", engine_digest(plan))
        drain = EngineRolloutArgs(
            self.rack_target,
            self.user,
            f"{API_CONTAINER}.service",
            http_url(plan.serving.address, plan.serving.port, "/metrics"),
            generation,
        )
        # What each node prepared, not the engines: their containers come after the rollout.
        prepared = [r for engine in engines for r in engine.prepared]
        after = pulumi.ResourceOptions(parent=self, depends_on=prepared)
        return EngineRollout(f"{node.name}-engine-rollout", drain, after)

    def fence(self, node: NodePlan, target: Target) -> NftTable:
        """The planned services answered to the rack and its clients only (plan/fence.py); its
        resource keeps the name it had when it fenced Ray's ports alone (renamed, it would be
        replaced)."""
        fence, child = node.fence, pulumi.ResourceOptions(parent=self)
        table = NftTableArgs(target, "inet", FENCE_TABLE, fence.rules, fence.script)
        return NftTable(f"{node.name}-ray-fence", table, child)

    def join_gate(self, plan: Plan, worker: str) -> RayCluster:
        """On the head: what a worker's Ray waits for. The first wave, the head's Ray; each later
        one, Ray holding the head and every earlier wave (plan.serving.ray_join_waves)."""
        waves = plan.serving.ray_join_waves
        wave = next(i for i, names in enumerate(waves) if worker in names)
        if wave not in self.gates:
            earlier = waves[wave - 1]
            if not all(name in self.workers for name in earlier):
                after = ", ".join(earlier)
                raise ValueError(f"{worker} joins Ray after {after}: create them first")
            joined = 1 + sum(len(names) for names in waves[:wave])
            gate = RayClusterArgs(
                self.rack_target, self.user, HEAD_CONTAINER, joined, self.ray.image_id
            )
            self.gates[wave] = RayCluster(
                f"{plan.head_node}-ray-joined-{joined}",
                gate,
                pulumi.ResourceOptions(
                    parent=self, depends_on=[self.workers[name] for name in earlier]
                ),
            )
        return self.gates[wave]

    def engine_image(self, plan: Plan, node: NodePlan, head: Inference | None) -> Image:
        """The engine image, kept when replaced or destroyed (the previous engine is a rollback
        until a prune): shipped from the head; there, from where the stack says."""
        child, name = pulumi.ResourceOptions(parent=self), f"{node.name}-engine-image"
        image = ImageArgs(self.target, self.user, plan.serving.image, keep=True)
        if head is not None:
            ship = ship_from_head(plan, node, head.image, head.target)
            return Image(name, replace(image, ship_from=ship), child)
        if plan.serving.image_source == "control":
            return ControlImage(name, image.target, image.user, image.reference, True, child)
        # The plan's Containerfile ("" unless the head builds the image: then it is found)
        return Image(name, replace(image, containerfile=plan.serving.containerfile), child)


@dataclass(frozen=True)
class InferenceServeArgs:
    plan: Plan
    head: Inference  # the head's engine: its target and user, its image and Ray
    rollout: EngineRollout  # the drain a change restarts the engine after
    standing: str = ""  # why `vllm serve` stands still this run (deploy.rack_not_whole)
    api_key: pulumi.Input[str] | None = None  # the API's key (a Pulumi secret), when it asks one


class InferenceServe(pulumi.ComponentResource):
    """`vllm serve` on the head, once Ray has every node; ready when the API lists the model."""

    def __init__(
        self, name: str, args: InferenceServeArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(f"{token(ROLE)}Serve", name, None, opts)
        plan, head = args.plan, args.head
        node, user = plan.node(plan.head_node), head.user
        target = head.target.standing_still(args.standing)
        run_as = replace(head.run_as, target=target)
        ray_ready = RayClusterArgs(
            target, user, HEAD_CONTAINER, len(plan.nodes), generation(self.engine(head))
        )
        complete = RayCluster(
            f"{node.name}-ray-cluster", ray_ready, pulumi.ResourceOptions(parent=self)
        )
        key = self.api_key(plan, target, user, args.api_key)
        api = container(
            node.engine_containers[1],  # the Plan's `vllm serve`, beside the head's Ray
            run_as,
            head.image.image_id,
            pulumi.ResourceOptions(parent=self, depends_on=[complete, *key]),
            rollout=keyed(args.rollout.generation, key),  # restarted after any change
        )
        # After every other repair of the run (it depends on all of them): a rank that NCCL
        # started off its HCAs (a port down then, up now) restarts the engine.
        transport = EngineTransport(
            f"{node.name}-engine-transport",
            EngineTransportArgs(
                target,
                user,
                f"{API_CONTAINER}.service",
                node.paths.engine_log,
                planned_transport(plan),
                plan.roles.inference.api_ready_timeout_s,
            ),
            pulumi.ResourceOptions(parent=self, depends_on=[api]),
        )
        engine = keyed(generation([*self.engine(head), api]), key)
        served = ServedModelArgs(
            target,
            user,
            API_CONTAINER,
            plan.serving.port,
            plan.serving.served_model_name,
            plan.roles.inference.api_ready_timeout_s,
            # waited for again after the transport's restart, as after a change
            after=pulumi.Output.all(engine, transport.restarted_at).apply(
                lambda seen: f"{seen[0]} {seen[1]}" if seen[1] else seen[0]
            ),
            stopped_at=args.rollout.stopped_at,
            key_secret=plan.serving.api_key_secret,
        )
        after_transport = pulumi.ResourceOptions(parent=self, depends_on=[transport])
        self.served = ServedModel(f"{node.name}-served-model", served, after_transport)
        self.register_outputs({})

    @staticmethod
    def engine(head: Inference) -> list[Container]:
        """Every node's Ray container, the head's first."""
        return [head.ray, *head.workers.values()]

    def api_key(
        self, plan: Plan, target: Target, user: str, key: pulumi.Input[str] | None
    ) -> list[PodmanSecret]:
        """The API's key in the service user's Podman, over stdin (resources/podman_secret.py),
        where the Plan asks for one."""
        secret = plan.serving.api_key_secret
        if secret is None:
            return []
        if key is None:
            raise ValueError(f"stack {plan.stack}: the Plan's API asks for a key and none is given")
        name, child = f"{plan.head_node}-api-key", pulumi.ResourceOptions(parent=self)
        return [PodmanSecret(name, target, user, secret, key, child)]


def keyed(generation: pulumi.Output[str], key: list[PodmanSecret]) -> pulumi.Output[str]:
    """`generation` and the API key's last change, which vLLM reads only when it starts: as the
    API's rollout, a rotated key restarts it and the old key stops working; as what the served
    model's gate waits after, `up` ends once it serves again. Before any change of key it is
    `generation` alone, as it was before keys could change."""
    if not key:
        return generation
    return pulumi.Output.all(generation, key[0].changed_at).apply(
        lambda seen: f"{seen[0]} key {seen[1]}" if seen[1] else seen[0]
    )


def planned_transport(plan: Plan) -> dict[str, list[str]]:
    """Each rank's planned HCAs, by host: what its NCCL lines must name. A rack of one node has
    no network between ranks to read."""
    if len(plan.nodes) < 2:
        return {}
    return {node.name: sorted(node.rdma_devices) for node in plan.nodes if node.rdma_devices}


def generation(containers: list[Container]) -> pulumi.Output[str]:
    """What the engine runs, as one value that each container's image and unit change: a
    readiness wait that takes it as `after` waits again after every change that restarts an
    engine container (a flag, `max_model_len`, a revision, a worker's env), not only after a
    new model name or image, so verification never meets an engine still loading."""
    parts = [pulumi.Output.concat(c.image_id, " ", c.unit_sha256) for c in containers]
    return pulumi.Output.all(*parts).apply(lambda seen: sha256_of("\n".join(seen)))

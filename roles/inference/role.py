"""The inference role: the engine image, the model directory and a Ray container on every node;
`vllm serve` beside the head's Ray once every node has joined.

ModelWeights (one per node, when the stack names `serving.weights`) puts the node's share of the
checkpoint into its model dir, in the Hugging Face cache layout vLLM finds offline: the head
holds the checkpoint (downloaded, or a directory the stack names), and every node copies its
files from its parent in the plan's shipping tree or from the head (sparkrack.plan.weights).

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
from dataclasses import dataclass
from typing import Any

import pulumi

from roles.common import ship_from_head, token
from roles.containers import container
from sparkrack.plan import NodePlan, Plan
from sparkrack.plan.engine import API_CONTAINER, HEAD_CONTAINER, api_container, ray_container
from sparkrack.plan.fence import FENCE_TABLE
from sparkrack.plan.rollout import engine_digest
from sparkrack.plan.weights import full_set, node_files, ship_tree, sources
from sparkrack.resources.engine import (
    ControlImage,
    Directory,
    EngineRollout,
    RayCluster,
    ServedModel,
)
from sparkrack.resources.engine_transport import EngineTransport
from sparkrack.resources.files import RemoteFile, sha256_of
from sparkrack.resources.firewall import NftTable
from sparkrack.resources.podman import Container, Image
from sparkrack.resources.podman_secret import PodmanSecret
from sparkrack.resources.weights import Checkpoint, ModelShards
from sparkrack.text.addresses import http_url
from sparkrack.transport.target import Target

ROLE = "inference"


def node_share(
    plan: Plan, node: str, files: dict[str, Any], contents: dict[str, Any]
) -> dict[str, dict[str, Any]]:
    """The node's files (name -> size, sha256) and where each comes from, once the head's
    checkpoint is known: its stage's shards, or everything without layer-aware shipping."""
    weights, origin = plan.serving.weights, plan.head_node
    assert weights is not None
    layer_aware = weights.layer_aware and plan.layout.pipeline_parallel_size > 1
    names = sorted(files)
    needs = (
        node_files(contents, names, plan.layout) if layer_aware else full_set(plan.layout, names)
    )
    chosen = sources(needs, ship_tree(plan.layout, origin), origin)[node]
    return {"files": {name: files[name] for name in needs[node]}, "sources": chosen}


@dataclass(frozen=True)
class ModelWeightsArgs:
    plan: Plan
    node: NodePlan
    user: str
    head: ModelWeights | None = None  # None on the head: it holds the checkpoint
    hf_token: pulumi.Input[str] | None = None


class ModelWeights(pulumi.ComponentResource):
    """One node's share of the checkpoint in its model dir; on the head, the checkpoint too.
    `placed` (shared through the head's) holds every node's ModelShards so far: a node waits
    for its parent in the shipping tree, which __main__'s order (the plan's) creates first."""

    checkpoint: Checkpoint
    shards: ModelShards

    def __init__(
        self, name: str, args: ModelWeightsArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(f"{token(ROLE)}Weights", name, None, opts)
        plan, node, user = args.plan, args.node, args.user
        head, hf_token = args.head, args.hf_token
        staging, origin = plan.staging, plan.node(plan.head_node)
        assert staging is not None
        self.snapshot = staging.snapshot_dir
        target = Target.for_node(node)
        if head is None:
            self.checkpoint = self.head_checkpoint(plan, node, user, hf_token)
            self.placed: dict[str, ModelShards] = {}
        else:
            self.checkpoint, self.placed = head.checkpoint, head.placed
        parent = ship_tree(plan.layout, origin.name).get(node.name)
        if parent is not None and parent not in self.placed:
            raise ValueError(f"{node.name}'s weights come from {parent}: create {parent} first")
        share = pulumi.Output.all(self.checkpoint.files, self.checkpoint.contents).apply(
            lambda found: node_share(plan, node.name, found[0], found[1])
        )
        after: list[pulumi.Resource] = [self.checkpoint]
        after += [self.placed[parent]] if parent is not None else []
        # Kept on destroy: the weights cost a long download.
        keep = pulumi.ResourceOptions(parent=self, depends_on=after, retain_on_delete=True)
        self.shards = ModelShards(
            f"{node.name}-model-shards",
            target,
            user,
            self.snapshot,
            share.apply(lambda s: s["files"]),
            share.apply(lambda s: s["sources"]),
            {
                source: route.model_dump(exclude_none=True)
                for source, route in staging.routes[node.name].items()
            },
            Target.for_node(origin),
            plan.roles.base.trust_key_name,
            keep,
        )
        self.placed[node.name] = self.shards
        # refs/<revision> names the snapshot, so that vLLM finds the model offline by its repo.
        # It is part of the cache the weights are (issue 31): a destroy, or a revision changed
        # and back, leaves it with them.
        ref = posixpath.join(staging.repo_dir, "refs", plan.serving.revision)
        RemoteFile(
            f"{node.name}-model-ref",
            target,
            ref,
            plan.serving.revision,
            owner=user,
            group=user,
            opts=pulumi.ResourceOptions(parent=self, retain_on_delete=True),
        )
        self.register_outputs({"files": self.shards.files})

    def head_checkpoint(
        self, plan: Plan, node: NodePlan, user: str, hf_token: pulumi.Input[str] | None
    ) -> Checkpoint:
        weights, staging = plan.serving.weights, plan.staging
        child = pulumi.ResourceOptions(parent=self)
        assert weights is not None and staging is not None
        directory = staging.checkpoint_dir
        if weights.source == "directory":
            target = Target.for_node(node)
            return Checkpoint(f"{node.name}-checkpoint", target, user, directory, opts=child)
        download = {
            "endpoint": weights.endpoint,
            "repo": plan.serving.model,
            "revision": plan.serving.revision,
        }
        return Checkpoint(
            f"{node.name}-checkpoint",
            Target.for_node(node),
            user,
            directory,
            download=download,
            token=hf_token,
            opts=pulumi.ResourceOptions(parent=self, retain_on_delete=True),
        )


@dataclass(frozen=True)
class ModelStore:
    """A node's model dir and, when the stack stages weights, its share of them."""

    model_dir: str
    directory: Directory
    weights: ModelWeights | None


def model_store(
    plan: Plan,
    node: NodePlan,
    user: str,
    head: ModelWeights | None,
    hf_token: pulumi.Input[str] | None,
    opts: pulumi.ResourceOptions,
) -> ModelStore:
    """The model dir (the stack's, which must exist, or one in the home) and the node's staged
    weights in it; both kept on destroy: the weights cost a long download."""
    target, model_dir = Target.for_node(node), node.paths.model_dir
    keep = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(retain_on_delete=True))
    create = plan.serving.model_dir is None  # the stack's own must exist; sparkrack never makes it
    directory = Directory(f"{node.name}-model-dir", target, model_dir, user, create, keep)
    weights = None
    if plan.serving.weights is not None:
        after = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=[directory]))
        args = ModelWeightsArgs(plan, node, user, head, hf_token)
        weights = ModelWeights(f"{node.name}-weights", args, after)
    return ModelStore(model_dir, directory, weights)


@dataclass(frozen=True)
class InferenceArgs:
    plan: Plan
    node: NodePlan
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
        plan, node, head, hf_token = args.plan, args.node, args.head, args.hf_token
        user_home = (args.user, args.home)
        target, user, self.head_ready = Target.for_node(node), args.user, None
        self.ray_target, self.user = target, user
        # The head's gates and rollout span the rack: they stand still while it is not whole.
        self.rack_target = target.standing_still(args.standing)
        child = pulumi.ResourceOptions(parent=self)
        self.image = self.engine_image(plan, node, target, user, head)
        self.ray_dir = node.paths.ray_dir
        head_weights = head.weights if head is not None else None
        store = model_store(plan, node, user, head_weights, hf_token, child)
        self.model_dir, self.weights = store.model_dir, store.weights
        after: list[pulumi.Resource] = [self.image, store.directory, self.fence(node, target)]
        after += [self.weights] if self.weights is not None else []
        if node.role == "head":
            after.append(Directory(f"{node.name}-ray-dir", target, self.ray_dir, user, opts=child))
            self.engine_log = node.paths.engine_log
            log_dir = posixpath.dirname(self.engine_log)
            after.append(Directory(f"{node.name}-engine-log", target, log_dir, user, opts=child))
        self.prepared, self.node, self.head, self.user_home = after, node, head, user_home
        self.register_outputs({"image_id": self.image.image_id})

    def start(self, plan: Plan, rollout: EngineRollout) -> None:
        """The node's Ray, once every node has what the change brings (images, weights) and the
        serving engine has drained (the rollout): the head's first, each worker after its gate."""
        node, head = self.node, self.head
        after = [*self.prepared, rollout]
        if head is not None:
            after.append(head.join_gate(plan, node.name))
        spec = ray_container(plan, node, self.model_dir, self.ray_dir)
        self.ray = container(
            f"{node.name}-{spec.name}",
            self.ray_target,
            self.user_home,
            spec,
            self.image.image_id,
            pulumi.ResourceOptions(parent=self, depends_on=after),
        )
        target, user = self.ray_target, self.user
        if node.role == "head":
            self.head_ready = RayCluster(
                f"{node.name}-ray-head-ready",
                target,
                user,
                HEAD_CONTAINER,
                1,
                after=self.ray.image_id,
                opts=pulumi.ResourceOptions(parent=self, depends_on=[self.ray]),
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
        return EngineRollout(
            f"{node.name}-engine-rollout",
            self.rack_target,
            self.user,
            f"{API_CONTAINER}.service",
            http_url(plan.serving.address, plan.serving.port, "/metrics"),
            generation,
            # What each node prepared, not the engines: their containers come after the rollout.
            opts=pulumi.ResourceOptions(
                parent=self, depends_on=[r for engine in engines for r in engine.prepared]
            ),
        )

    def fence(self, node: NodePlan, target: Target) -> NftTable:
        """The planned services answered to the rack and its clients only (plan/fence.py); its
        resource keeps the name it had when it fenced Ray's ports alone (renamed, it would be
        replaced)."""
        fence, child = node.fence, pulumi.ResourceOptions(parent=self)
        rules, name = list(fence.rules), f"{node.name}-ray-fence"
        return NftTable(name, target, "inet", FENCE_TABLE, rules, fence.script, opts=child)

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
            self.gates[wave] = RayCluster(
                f"{plan.head_node}-ray-joined-{joined}",
                self.rack_target,
                self.user,
                HEAD_CONTAINER,
                joined,
                after=self.ray.image_id,
                opts=pulumi.ResourceOptions(
                    parent=self, depends_on=[self.workers[name] for name in earlier]
                ),
            )
        return self.gates[wave]

    def engine_image(
        self, plan: Plan, node: NodePlan, target: Target, user: str, head: Inference | None
    ) -> Image:
        child, name, reference = (
            pulumi.ResourceOptions(parent=self),
            f"{node.name}-engine-image",
            plan.serving.image,
        )
        # Kept when replaced or destroyed: the previous engine is a rollback until a prune.
        if head is not None:
            ship = ship_from_head(plan, node, head.image)
            return Image(name, target, user, reference, ship_from=ship, keep=True, opts=child)
        if plan.serving.image_source == "control":
            return ControlImage(name, target, user, reference, keep=True, opts=child)
        # The plan's Containerfile ("" unless the head builds the image: then it is found)
        containerfile = plan.serving.containerfile
        return Image(
            name, target, user, reference, containerfile=containerfile, keep=True, opts=child
        )


@dataclass(frozen=True)
class InferenceServeArgs:
    plan: Plan
    head: Inference  # the head's engine: its image, model and Ray directories
    user: str
    home: str
    rollout: EngineRollout  # the drain a change restarts the engine after
    standing: str = ""  # why `vllm serve` stands still this run (deploy.rack_not_whole)
    api_key: pulumi.Input[str] | None = None  # the API's key (a Pulumi secret), when it asks one


class InferenceServe(pulumi.ComponentResource):
    """`vllm serve` on the head, once Ray has every node; ready when the API lists the model."""

    def __init__(
        self, name: str, args: InferenceServeArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(f"{token(ROLE)}Serve", name, None, opts)
        plan, head, user_home = args.plan, args.head, (args.user, args.home)
        node = plan.node(plan.head_node)
        target, user = Target.for_node(node), user_home[0]
        target = target.standing_still(args.standing)
        complete = RayCluster(
            f"{node.name}-ray-cluster",
            target,
            user,
            HEAD_CONTAINER,
            len(plan.nodes),
            after=generation([head.ray, *head.workers.values()]),
            opts=pulumi.ResourceOptions(parent=self),
        )
        spec = api_container(plan, head.model_dir, head.ray_dir, head.engine_log)
        key = self.api_key(plan, target, user, args.api_key)
        api = container(
            f"{node.name}-{spec.name}",
            target,
            user_home,
            spec,
            head.image.image_id,
            pulumi.ResourceOptions(parent=self, depends_on=[complete, *key]),
            rollout=args.rollout.generation,  # drained by it: restarted after any change
        )
        # After every other repair of the run (it depends on all of them): a rank that NCCL
        # started off its HCAs (a port down then, up now) restarts the engine.
        transport = EngineTransport(
            f"{node.name}-engine-transport",
            target,
            (user, f"{API_CONTAINER}.service"),
            node.paths.engine_log,
            planned_transport(plan),
            plan.roles.inference.api_ready_timeout_s,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[api]),
        )
        engine = generation([head.ray, *head.workers.values(), api])
        self.served = ServedModel(
            f"{node.name}-served-model",
            target,
            (user, API_CONTAINER),
            plan.serving.port,
            plan.serving.served_model_name,
            plan.roles.inference.api_ready_timeout_s,
            # waited for again after the transport's restart, as after a change
            after=pulumi.Output.all(engine, transport.restarted_at).apply(
                lambda seen: f"{seen[0]} {seen[1]}" if seen[1] else seen[0]
            ),
            stopped_at=args.rollout.stopped_at,
            key_secret=plan.serving.api_key_secret,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[transport]),
        )
        self.register_outputs({})

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

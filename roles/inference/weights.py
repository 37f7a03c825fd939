"""The inference role's model store: each node's model dir and, when the stack stages weights,
its share of the checkpoint in it.

ModelWeights (one per node, when the stack names `serving.weights`) puts the node's share of the
checkpoint into its model dir, in the Hugging Face cache layout vLLM finds offline: the head
holds the checkpoint (downloaded, or a directory the stack names), and every node copies its
files from its parent in the plan's shipping tree or from the head (sparkrack.plan.weights).
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from typing import Any

import pulumi

from roles.common import token
from sparkrack.plan import NodePlan, Plan
from sparkrack.plan.weights import full_set, node_files, ship_tree, sources
from sparkrack.resources.engine import Directory
from sparkrack.resources.files import RemoteFile, RemoteFileArgs
from sparkrack.resources.weights import Checkpoint, CheckpointArgs, ModelShards, ModelShardsArgs
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
    target: Target  # how the program reaches the node
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
        plan, node, user, head = args.plan, args.node, args.user, args.head
        staging, origin = plan.staging, plan.head_node
        assert staging is not None
        self.snapshot, self.target = staging.snapshot_dir, args.target
        if head is None:
            self.checkpoint = self.head_checkpoint(plan, node, args)
            self.placed: dict[str, ModelShards] = {}
            self.head_target = args.target
        else:
            self.checkpoint, self.placed = head.checkpoint, head.placed
            self.head_target = head.target
        parent = ship_tree(plan.layout, origin).get(node.name)
        if parent is not None and parent not in self.placed:
            raise ValueError(f"{node.name}'s weights come from {parent}: create {parent} first")
        after: list[pulumi.Resource] = [self.checkpoint]
        after += [self.placed[parent]] if parent is not None else []
        # Kept on destroy: the weights cost a long download.
        keep = pulumi.ResourceOptions(parent=self, depends_on=after, retain_on_delete=True)
        self.shards = ModelShards(f"{node.name}-model-shards", self.shards_args(plan, args), keep)
        self.placed[node.name] = self.shards
        # refs/<revision> names the snapshot, so that vLLM finds the model offline by its repo.
        # It is part of the cache the weights are (issue 31): a destroy, or a revision changed
        # and back, leaves it with them.
        ref = posixpath.join(staging.repo_dir, "refs", plan.serving.revision)
        revision = RemoteFileArgs(args.target, ref, plan.serving.revision, owner=user, group=user)
        kept = pulumi.ResourceOptions(parent=self, retain_on_delete=True)
        RemoteFile(f"{node.name}-model-ref", revision, kept)
        self.register_outputs({"files": self.shards.files})

    def shards_args(self, plan: Plan, args: ModelWeightsArgs) -> ModelShardsArgs:
        """The node's share, once the checkpoint is known, copied by the head with its key."""
        staging, name = plan.staging, args.node.name
        assert staging is not None
        share = pulumi.Output.all(self.checkpoint.files, self.checkpoint.contents).apply(
            lambda found: node_share(plan, name, found[0], found[1])
        )
        return ModelShardsArgs(
            target=args.target,
            user=args.user,
            directory=self.snapshot,
            files=share.apply(lambda s: s["files"]),
            sources=share.apply(lambda s: s["sources"]),
            routes={
                source: route.model_dump(exclude_none=True)
                for source, route in staging.routes[name].items()
            },
            via=self.head_target,
            key_name=plan.roles.base.trust_key_name,
        )

    def head_checkpoint(self, plan: Plan, node: NodePlan, args: ModelWeightsArgs) -> Checkpoint:
        weights, staging = plan.serving.weights, plan.staging
        assert weights is not None and staging is not None
        directory, name = staging.checkpoint_dir, f"{node.name}-checkpoint"
        if weights.source == "directory":
            found = CheckpointArgs(args.target, args.user, directory)
            return Checkpoint(name, found, pulumi.ResourceOptions(parent=self))
        download = {
            "endpoint": weights.endpoint,
            "repo": plan.serving.model,
            "revision": plan.serving.revision,
        }
        fetched = CheckpointArgs(args.target, args.user, directory, download, args.hf_token)
        return Checkpoint(name, fetched, pulumi.ResourceOptions(parent=self, retain_on_delete=True))


@dataclass(frozen=True)
class ModelStore:
    """A node's model dir and, when the stack stages weights, its share of them."""

    model_dir: str
    directory: Directory
    weights: ModelWeights | None


def model_store(args: ModelWeightsArgs, opts: pulumi.ResourceOptions) -> ModelStore:
    """The model dir (the stack's, which must exist, or one in the home) and the node's staged
    weights in it; both kept on destroy: the weights cost a long download."""
    plan, node, model_dir = args.plan, args.node, args.node.paths.model_dir
    keep = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(retain_on_delete=True))
    create = plan.serving.model_dir is None  # the stack's own must exist; sparkrack never makes it
    directory = Directory(f"{node.name}-model-dir", args.target, model_dir, args.user, create, keep)
    weights = None
    if plan.serving.weights is not None:
        after = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=[directory]))
        weights = ModelWeights(f"{node.name}-weights", args, after)
    return ModelStore(model_dir, directory, weights)

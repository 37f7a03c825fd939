"""The weights alone, deployed as infra/__main__.py deploys them (sparkrack.deploy): base (the
head's key and pinned host keys) and fabric (the addresses copies travel over) on every node, then
each node's model store as the inference role makes it, the head first and the rest in the plan's
order.

The weights e2e (test_weights_sim) and the sim-16 benchmark run this program: Ray and vLLM on 16
nodes do not fit a small CI machine, and they have their own e2e tests. Config: the stack's
`sparkrack:cluster`, as for the real program; its `serving.weights` names the checkpoint. Without
`serving.weights` only the roles: the benchmark brings them up before it times shipping.
"""

import pulumi

from roles.inference.weights import ModelWeights, ModelWeightsArgs, model_store
from sparkrack.config.load import spec_from_config
from sparkrack.config.secrets import hf_token
from sparkrack.deploy import NodeRoles, after_head_trust, deploy
from sparkrack.plan import Plan, make_plan


def model_stores(
    plan: Plan, below: list[NodeRoles], token: pulumi.Input[str] | None
) -> dict[str, ModelWeights]:
    """The model store of every node as the inference role makes it, in the Plan's order."""
    placed: dict[str, ModelWeights] = {}
    head: ModelWeights | None = None
    for nodes in below:
        opts = after_head_trust(nodes, below[0])
        args = ModelWeightsArgs(plan, nodes.node, nodes.target, nodes.base.user, head, token)
        store = model_store(args, opts)
        assert store.weights is not None  # the Plan stages weights
        head = head or store.weights
        placed[nodes.node.name] = store.weights
    return placed


plan = make_plan(
    spec_from_config(pulumi.get_stack(), pulumi.Config("sparkrack").require_object("cluster"))
)
token = hf_token()
deployed = deploy(plan.deploying({"base", "fabric"}))
if plan.serving.weights is not None:
    for node, weights in model_stores(plan, deployed.nodes, token).items():
        pulumi.export(f"files-{node}", weights.shards.files)

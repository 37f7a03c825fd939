"""The weights alone, wired as the inference role wires them: spec -> plan -> base (the head's
key and pinned host keys) and fabric (the addresses copies travel over) on every node, then each
node's ModelWeights, the head first and the rest in the plan's order.

The weights e2e (test_weights_sim) and the sim-16 benchmark run this program: Ray and vLLM on 16
nodes do not fit a small CI machine, and they have their own e2e tests. Config: the stack's
`sparkrack:cluster`, as for the real program; its `serving.weights` names the checkpoint.
"""

import posixpath

import pulumi

from roles.base.role import Base
from roles.common import defaults
from roles.fabric.role import Fabric
from roles.inference.role import ModelWeights
from sparkrack.load import spec_from_config
from sparkrack.plan import make_plan

plan = make_plan(
    spec_from_config(pulumi.get_stack(), pulumi.Config("sparkrack").require_object("cluster"))
)
head_key, bases = None, []
ordered = sorted(plan.nodes, key=lambda node: node.name != plan.head_node)
for node in ordered:
    base = Base(plan, node, head_key)
    head_key = head_key or base.public_key
    fabric = Fabric(node, pulumi.ResourceOptions(depends_on=[base]))
    bases.append((base, fabric))
head = None
# Without `serving.weights` only the roles: the benchmark brings them up before it times shipping.
for node, (base, fabric) in zip(ordered, bases if plan.serving.weights else [], strict=False):
    model_dir = posixpath.join(base.home, defaults("inference")["model_dir"])
    after = pulumi.ResourceOptions(depends_on=[base, fabric, bases[0][0].trust])
    weights = ModelWeights(plan, node, base.user, model_dir, head, after)
    head = head or weights
    pulumi.export(f"files-{node.name}", weights.shards.files)

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

from sparkrack.deploy import Secrets, deploy
from sparkrack.load import hf_token, spec_from_config
from sparkrack.plan import make_plan

plan = make_plan(
    spec_from_config(pulumi.get_stack(), pulumi.Config("sparkrack").require_object("cluster"))
)
deployed = deploy(
    plan.deploying({"base", "fabric"}), Secrets(hf_token=hf_token()), model_store_only=True
)
for node, weights in deployed.weights.items():
    pulumi.export(f"files-{node}", weights.shards.files)

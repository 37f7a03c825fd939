"""The sparkrack Pulumi program: wiring only.

stack config -> spec (validated) -> plan (pure) -> roles -> exports. Bad input stops at the first
two steps, before any resource exists, so no node is touched by a stack that cannot work.
"""

import pulumi

from roles.base.role import Base
from roles.cpu_pinning.role import CpuPinning
from roles.fabric.role import Fabric
from roles.podman.role import Podman
from sparkrack.load import SpecError, spec_from_config
from sparkrack.plan import make_plan

stack = pulumi.get_stack()
try:
    spec = spec_from_config(stack, pulumi.Config("sparkrack").require_object("cluster"))
    plan = make_plan(spec)
except SpecError as error:
    # RunError ends the program with the message alone, not a traceback of this file.
    raise pulumi.RunError(str(error)) from None

# The head first: its public key is what the other nodes authorize.
ordered = sorted(plan.nodes, key=lambda node: node.name != plan.head_node)
head_key = None
roles = {}
for node in ordered:
    base = Base(plan, node, head_key)
    head_key = head_key or base.public_key
    after_base = pulumi.ResourceOptions(depends_on=[base])
    fabric = Fabric(node, after_base)
    pinning = CpuPinning(node, after_base)
    podman = Podman(node, base.user, base.home, after_base)
    roles[node.name] = {
        "fabric": fabric.netdevs,
        "compute_cpuset": pinning.compute_cpuset,
        "podman_runtime": podman.runtime,
    }

pulumi.export("plan_digest", plan.digest())
pulumi.export("nodes", [node.name for node in plan.nodes])
pulumi.export("roles", roles)

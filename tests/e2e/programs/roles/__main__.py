"""Issue 5's roles alone, wired as infra/__main__.py wires them: spec -> plan -> base, fabric,
cpu_pinning and podman on every node, the head first.

The roles e2e (test_roles_deploy) and its sim-16 benchmark run this program, so that up, destroy,
an interrupted up and a stopped node are about these roles: the inference role's image shipping
and Ray start (minutes on the simulator) and the verification at the end are covered by their
own e2e tests. Config: the stack's `sparkrack:cluster`, as for the real program.
"""

import pulumi

from roles.base.role import Base
from roles.cpu_pinning.role import CpuPinning
from roles.fabric.role import Fabric
from roles.podman.role import Podman
from sparkrack.load import spec_from_config
from sparkrack.plan import make_plan
from sparkrack.resources.availability import fail_after, say_unavailable
from sparkrack.ssh import Target

plan = make_plan(
    spec_from_config(pulumi.get_stack(), pulumi.Config("sparkrack").require_object("cluster"))
)
unavailable = say_unavailable(Target.for_node(node) for node in plan.nodes)
head_key = None
made: list[pulumi.Resource] = []
for node in sorted(plan.nodes, key=lambda node: node.name != plan.head_node):
    base = Base(plan, node, head_key)
    head_key = head_key or base.public_key
    after_base = pulumi.ResourceOptions(depends_on=[base])
    made += [base, base.trust, Fabric(node, after_base), CpuPinning(node, after_base)]
    made.append(Podman(node, base.user, base.home, after_base))
fail_after(unavailable, made)

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

plan = make_plan(
    spec_from_config(pulumi.get_stack(), pulumi.Config("sparkrack").require_object("cluster"))
)
head_key = None
for node in sorted(plan.nodes, key=lambda node: node.name != plan.head_node):
    base = Base(plan, node, head_key)
    head_key = head_key or base.public_key
    after_base = pulumi.ResourceOptions(depends_on=[base])
    Fabric(node, after_base)
    CpuPinning(node, after_base)
    Podman(node, base.user, base.home, after_base)

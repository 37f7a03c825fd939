"""The node roles alone (base, fabric, cpu_pinning, podman), deployed as infra/__main__.py
deploys them (sparkrack.deploy), the head first.

The roles e2e (test_roles_deploy) and its sim-16 benchmark run this program, so that up, destroy,
an interrupted up and a stopped node are about these roles: the inference role's image shipping
and Ray start (minutes on the simulator) and the verification at the end are covered by their
own e2e tests. Config: the stack's `sparkrack:cluster`, as for the real program.
"""

import pulumi

from sparkrack.config.load import spec_from_config
from sparkrack.deploy import deploy
from sparkrack.plan import make_plan
from sparkrack.stackspec.roles import NODE_ROLES

plan = make_plan(
    spec_from_config(pulumi.get_stack(), pulumi.Config("sparkrack").require_object("cluster"))
)
deploy(plan.deploying(NODE_ROLES))

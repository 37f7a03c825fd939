"""The sparkrack Pulumi program: wiring only.

stack config -> spec (validated) -> plan (pure) -> roles -> exports. Bad input stops at the first
two steps, before any resource exists, so no node is touched by a stack that cannot work.
"""

import pulumi

from sparkrack.load import SpecError, spec_from_config
from sparkrack.plan import make_plan

stack = pulumi.get_stack()
try:
    spec = spec_from_config(stack, pulumi.Config("sparkrack").require_object("cluster"))
    plan = make_plan(spec)
except SpecError as error:
    # RunError ends the program with the message alone, not a traceback of this file.
    raise pulumi.RunError(str(error)) from None

pulumi.export("plan_digest", plan.digest())
pulumi.export("nodes", [node.name for node in plan.nodes])

"""The sparkrack Pulumi program: wiring only.

stack config -> spec (validated, and deployable on a real rack) -> plan (pure) -> the nodes other
stacks of the backend claim refused -> deploy (roles; it exports the Plan itself) -> exports. Bad
input stops before any resource exists, so no node is touched by a stack that cannot work or is
not its own. The secrets are read here, as Pulumi secrets, and handed to the roles by deploy.
"""

from pathlib import Path

import pulumi

from sparkrack.config.load import refuse_undeployable, spec_from_config
from sparkrack.config.secrets import api_key, grafana_admin_password, hf_token, refuse_plain_secrets
from sparkrack.deploy import Secrets, deploy
from sparkrack.ops import claims as backend_claims
from sparkrack.plan import make_plan
from sparkrack.plan.claims import plan_claims, refuse_claimed
from sparkrack.plan.rollout import footprint
from sparkrack.runtime.sdk_debug import drop_sdk_debug_lines
from sparkrack.runtime.sdk_wait import wait_linearly
from sparkrack.stackspec.errors import SpecError

drop_sdk_debug_lines()
wait_linearly()

stack = pulumi.get_stack()
config = pulumi.Config("sparkrack")
# The folder of the project's Pulumi.yaml (the engine's root directory; a project whose infra/ is
# a link has its own stacks), or this repository's when the SDK names none: where the other
# stacks are listed.
project_root = Path(pulumi.get_root_directory() or Path(__file__).parent.parent)
key = api_key()
try:
    refuse_plain_secrets(stack)
    raw = config.require_object("cluster")
    spec = refuse_undeployable(spec_from_config(stack, raw, api_key=key is not None))
    plan = make_plan(spec)
    # Another stack's nodes are refused before any is touched (plan/claims.py).
    others = backend_claims.other_claims(stack, project_root)
    for unread in others.unread:
        pulumi.log.warn(unread)
    refuse_claimed(plan, others.claims)
except SpecError as error:
    # RunError ends the program with the message alone, not a traceback of this file.
    raise pulumi.RunError(str(error)) from None

deployed = deploy(
    plan,
    secrets=Secrets(hf_token=hf_token(), grafana_password=grafana_admin_password(), api_key=key),
    verify=config.get_bool("verifyOnUp") is not False,
)

pulumi.export("plan_digest", plan.digest())
pulumi.export("nodes", [node.name for node in plan.nodes])
# What the next `up` of another stack in this backend refuses to take (plan/claims.py).
pulumi.export(backend_claims.CLAIMS_OUTPUT, plan_claims(plan).model_dump(mode="json"))
pulumi.export("roles", deployed.exports)
# What the next `sparkrack plan --against` compares a changed stack with (plan/rollout.py).
pulumi.export("engine", footprint(plan).model_dump(mode="json"))
if deployed.served is not None:
    pulumi.export("last_rollout_downtime_s", deployed.served.downtime_s)

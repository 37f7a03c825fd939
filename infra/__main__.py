"""The sparkrack Pulumi program: wiring only.

stack config -> spec (validated, and deployable on a real rack) -> plan (pure) -> deploy (roles)
-> exports. Bad input stops at the first two steps, before any resource exists, so no node is
touched by a stack that cannot work. The secrets are read here, as Pulumi secrets, and handed to
the roles by deploy.
"""

from pathlib import Path

import pulumi

from sparkrack.deploy import Secrets, VerifyOnUp, deploy
from sparkrack.load import (
    SpecError,
    api_key,
    grafana_admin_password,
    hf_token,
    refuse_plain_secrets,
    refuse_undeployable,
    spec_from_config,
)
from sparkrack.plan import make_plan
from sparkrack.plan.rollout import footprint
from sparkrack.sdk_debug import drop_sdk_debug_lines
from sparkrack.sdk_wait import wait_linearly

drop_sdk_debug_lines()
wait_linearly()

stack = pulumi.get_stack()
config = pulumi.Config("sparkrack")
key = api_key()
try:
    refuse_plain_secrets(stack)
    raw = config.require_object("cluster")
    spec = refuse_undeployable(spec_from_config(stack, raw, api_key=key is not None))
    plan = make_plan(spec)
except SpecError as error:
    # RunError ends the program with the message alone, not a traceback of this file.
    raise pulumi.RunError(str(error)) from None

# The end of `up` verifies the stack files of the project being run (the folder of its
# Pulumi.yaml: the engine's root directory; a project whose infra/ is a link has its own
# stacks), or, under the unit tests' mocks, which have no root, this repository's.
project_root = pulumi.get_root_directory() or str(Path(__file__).parent.parent)
verify = VerifyOnUp(stack, str(Path(project_root) / "stacks"))
deployed = deploy(
    plan,
    secrets=Secrets(hf_token=hf_token(), grafana_password=grafana_admin_password(), api_key=key),
    verify=verify if config.get_bool("verifyOnUp") is not False else None,
)

pulumi.export("plan_digest", plan.digest())
pulumi.export("nodes", [node.name for node in plan.nodes])
pulumi.export("roles", deployed.exports)
# What the next `sparkrack plan --against` compares a changed stack with (plan/rollout.py).
pulumi.export("engine", footprint(plan).model_dump(mode="json"))
if deployed.served is not None:
    pulumi.export("last_rollout_downtime_s", deployed.served.downtime_s)

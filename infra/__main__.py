"""The sparkrack Pulumi program: wiring only.

stack config -> spec (validated) -> plan (pure) -> roles -> exports. Bad input stops at the first
two steps, before any resource exists, so no node is touched by a stack that cannot work.
"""

from pathlib import Path

import pulumi

from roles.base.role import Base
from roles.cpu_pinning.role import CpuPinning
from roles.fabric.role import Fabric
from roles.inference.role import Inference, InferenceServe
from roles.monitoring.role import Monitoring, MonitoringServer
from roles.podman.role import Podman
from sparkrack.load import (
    SpecError,
    grafana_admin_password,
    refuse_plain_secrets,
    spec_from_config,
)
from sparkrack.plan import make_plan
from sparkrack.resources.availability import fail_after, say_unavailable
from sparkrack.resources.verification import verification
from sparkrack.ssh import Target

stack = pulumi.get_stack()
config = pulumi.Config("sparkrack")
try:
    refuse_plain_secrets(stack)
    spec = spec_from_config(stack, config.require_object("cluster"))
    plan = make_plan(spec)
except SpecError as error:
    # RunError ends the program with the message alone, not a traceback of this file.
    raise pulumi.RunError(str(error)) from None

# A node that does not answer, or offers another host key, is said once here and left alone.
unavailable = say_unavailable(Target.for_node(node) for node in plan.nodes)

# The head first: its public key is what the other nodes authorize.
ordered = sorted(plan.nodes, key=lambda node: node.name != plan.head_node)
head_key = None
roles = {}
bases: list[Base] = []
node_roles: list[list[pulumi.Resource]] = []
for node in ordered:
    base = Base(plan, node, head_key)
    head_key = head_key or base.public_key
    after_base = pulumi.ResourceOptions(depends_on=[base])
    fabric = Fabric(node, after_base)
    pinning = CpuPinning(node, after_base)
    podman = Podman(node, base.user, base.home, after_base)
    bases.append(base)
    node_roles.append([base, base.trust, fabric, pinning, podman])
    roles[node.name] = {
        "fabric": fabric.netdevs,
        "compute_cpuset": pinning.compute_cpuset,
        "podman_runtime": podman.runtime,
    }

# The engine after its node's roles and the head's trust: a worker's image comes from the head
# with the head's key, and a worker's Ray joins the head's.
head_engine = None
engines: list[pulumi.Resource] = []
for node, base, before in zip(ordered, bases, node_roles, strict=True):
    after_roles = pulumi.ResourceOptions(depends_on=[*before, bases[0].trust])
    engine = Inference(plan, node, (base.user, base.home), head_engine, after_roles)
    head_engine = head_engine or engine
    engines.append(engine)
if head_engine is not None:
    user_home = (bases[0].user, bases[0].home)
    after_engines = pulumi.ResourceOptions(depends_on=list(engines))
    engines.append(InferenceServe(plan, head_engine, user_home, after_engines))

# Monitoring beside inference, never after it: an engine that will not start is what it must
# show. The exporters follow their node's roles (the workers' image comes from the head with the
# head's key); Prometheus follows its node's exporters. Grafana's admin password is a secret.
monitors: list[pulumi.Resource] = []
if plan.monitoring.enabled:
    head_monitor = None
    for node, base, before in zip(ordered, bases, node_roles, strict=True):
        after_roles = pulumi.ResourceOptions(depends_on=[*before, bases[0].trust])
        monitor = Monitoring(plan, node, (base.user, base.home), head_monitor, after_roles)
        head_monitor = head_monitor or monitor
        monitors.append(monitor)
    password = grafana_admin_password()
    after_exporters = pulumi.ResourceOptions(depends_on=monitors[:1])
    user_home = (bases[0].user, bases[0].home)
    monitors.append(MonitoringServer(plan, user_home, password, after_exporters))
deployed = [*(r for per_node in node_roles for r in per_node), *engines, *monitors]

# Last, the same checks `sparkrack verify` runs: a failed one fails `pulumi up`. Re-run only
# when the plan changes. It verifies the stack files of the project being run (the folder of its
# Pulumi.yaml: the engine's root directory; a project whose infra/ is a link has its own stacks),
# or, under the unit tests' mocks, which have no root, this repository's.
# With a node left alone there is nothing whole to verify: the check leaves the state and so runs
# again at the next `up` that reaches every node.
fail_after(unavailable, deployed)
if config.get_bool("verifyOnUp") is not False and not unavailable:
    project_root = pulumi.get_root_directory() or str(Path(__file__).parent.parent)
    verification(
        "verify",
        stack=stack,
        digest=plan.digest(),
        stacks_dir=str(Path(project_root) / "stacks"),
        opts=pulumi.ResourceOptions(depends_on=deployed),
    )

pulumi.export("plan_digest", plan.digest())
pulumi.export("nodes", [node.name for node in plan.nodes])
pulumi.export("roles", roles)

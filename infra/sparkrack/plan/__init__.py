"""The planner: a validated ClusterSpec in, every node's desired state out, no I/O.

Deployment (roles), verification and the CLI all read the same Plan, so they cannot disagree.
The Plan's models are in plan.model, apart from `make_plan`, so that verification, which checks a
Plan it is handed, can read them without the planner.
`make_plan` refuses, with a SpecError, what only arithmetic across the spec reveals: a model that
does not fit, a TP that does not divide the heads, more stages than layers.
"""

from __future__ import annotations

from sparkrack.plan.cpus import plan_cpus
from sparkrack.plan.engine import engine_containers
from sparkrack.plan.fabric import fabric_sysctls, plan_fabric
from sparkrack.plan.fence import client_networks, host_name_problems, node_fence, rack_networks
from sparkrack.plan.fit import FitReport, plan_fit
from sparkrack.plan.listeners import node_listeners, refuse_port_clashes
from sparkrack.plan.model import NodePlan, Plan, canonical_digest
from sparkrack.plan.monitoring import plan_monitoring
from sparkrack.plan.nccl import management_nic, nccl_env, rdma_devices
from sparkrack.plan.parallel import ParallelLayout, hardware_summary, plan_layout
from sparkrack.plan.paths import plan_paths
from sparkrack.plan.perf import DecodeOptions, PerfEstimate, plan_performance
from sparkrack.plan.serving import ServingPlan, engine_env, plan_serving
from sparkrack.plan.weights import StagingInputs, StagingPlan, plan_staging
from sparkrack.stackspec import ClusterSpec, StrictModel
from sparkrack.stackspec.errors import SpecError
from sparkrack.stackspec.roles import ROLE_NAMES
from sparkrack.text.limits import MemlockLimit

__all__ = [
    "DecodeOptions",
    "Estimate",
    "NodePlan",
    "Plan",
    "canonical_digest",
    "estimate",
    "make_plan",
]


class Estimate(StrictModel):
    """Fit and speed only, for `sparkrack estimate`: a model that does not fit is an answer here."""

    hardware: str
    nodes: int
    layout: ParallelLayout
    fit: FitReport
    performance: PerfEstimate

    def flat(self) -> dict[str, object]:
        return {
            "hardware": self.hardware,
            "nodes": self.nodes,
            "tensor_parallel_size": self.layout.tensor_parallel_size,
            "pipeline_parallel_size": self.layout.pipeline_parallel_size,
            "layer_partition": list(self.layout.layer_partition),
            **self.fit.model_dump(mode="json"),
            **self.performance.model_dump(mode="json", exclude={"inputs"}),
            "decode_inputs": self.performance.inputs.model_dump(mode="json"),
        }


def make_plan(spec: ClusterSpec) -> Plan:
    layout = plan_layout(spec)
    refuse_port_clashes(spec, layout.head_node)
    fit = plan_fit(spec, layout)
    if not fit.fits:
        raise SpecError(spec.stack, [fit.problem()])
    if problems := host_name_problems(spec):
        raise SpecError(spec.stack, problems)
    fabric = plan_fabric(spec)
    rack, clients = rack_networks(spec, fabric.links), client_networks(spec)
    paths = plan_paths(spec)
    devices = {node.name: rdma_devices(spec, node, fabric) for node in spec.nodes}
    nodes = []
    for node in spec.nodes:
        nccl = nccl_env(spec, node, fabric)
        hardware = spec.hardware(node)
        listeners = node_listeners(spec, layout.head_node, node)
        nodes.append(
            NodePlan(
                name=node.name,
                address=node.address,
                hardware=node.hardware,
                role="head" if node.name == layout.head_node else "worker",
                stage=layout.stage_of(node.name).index,
                gpus=hardware.gpus,
                gpu_access=hardware.gpu_access,
                ssh_user=node.ssh.user or spec.ssh.user,
                ssh_port=node.ssh.port or spec.ssh.port,
                ssh_key_path=node.ssh.key_path or spec.ssh.key_path,
                ssh_known_hosts=node.ssh.known_hosts or spec.ssh.known_hosts,
                management_nic=management_nic(spec, node),
                nics=tuple(function for port in hardware.ports for function in port.functions),
                links=fabric.links[node.name],
                sysctls=fabric_sysctls(fabric.links[node.name]),
                rdma_devices=devices[node.name],
                nccl_env=nccl,
                engine_env=engine_env(spec, node, layout, nccl),
                cpus=plan_cpus(spec, node),
                memlock_limit=MemlockLimit.parse(str(hardware.memlock_limit)),
                listeners=listeners,
                fence=node_fence(node.address, listeners, rack, clients),
                paths=paths,
                engine_containers=(),  # placed once the Plan they derive from is whole
            )
        )
    serving = plan_serving(spec, layout)
    plan = Plan(
        stack=spec.stack,
        head_node=layout.head_node,
        fit=fit,
        layout=layout,
        nodes=tuple(nodes),
        jumbo_pings=fabric.pings,
        rdma_floor_gbps=spec.fabric.rdma_floor_gbps if spec.fabric else 0.0,
        serving=serving,
        staging=staging(serving, layout, paths.model_dir, nodes),
        monitoring=plan_monitoring(spec, devices),
        performance=plan_performance(spec, layout, fit),
        roles=spec.roles,
        deploys=ROLE_NAMES,
        takeover=spec.takeover,
    )
    return with_engine_containers(plan)


def with_engine_containers(plan: Plan) -> Plan:
    """`plan` with every node's engine containers placed: they derive from the serving plan,
    the layout and the node, so they come last."""
    nodes = tuple(
        node.model_copy(update={"engine_containers": engine_containers(plan, node)})
        for node in plan.nodes
    )
    return plan.model_copy(update={"nodes": nodes})


def staging(
    serving: ServingPlan, layout: ParallelLayout, model_dir: str, nodes: list[NodePlan]
) -> StagingPlan | None:
    """Where the staged weights go and by which routes, when the stack stages them."""
    if serving.weights is None:
        return None
    given = StagingInputs(
        weights=serving.weights,
        model_dir=model_dir,
        repo=serving.model,
        revision=serving.revision,
        layout=layout,
        links={node.name: node.links for node in nodes},
        addresses={node.name: node.address for node in nodes},
    )
    return plan_staging(given)


def estimate(spec: ClusterSpec, options: DecodeOptions | None = None) -> Estimate:
    layout = plan_layout(spec)
    fit = plan_fit(spec, layout)
    return Estimate(
        hardware=hardware_summary(spec),
        nodes=len(spec.nodes),
        layout=layout,
        fit=fit,
        performance=plan_performance(spec, layout, fit, options),
    )

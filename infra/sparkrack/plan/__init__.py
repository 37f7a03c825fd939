"""The planner: a validated ClusterSpec in, every node's desired state out, no I/O.

Deployment (roles), verification and the CLI all read the same Plan, so they cannot disagree.
`make_plan` refuses, with a SpecError, what only arithmetic across the spec reveals: a model that
does not fit, a TP that does not divide the heads, more stages than layers.
"""

from __future__ import annotations

import hashlib
import json
from typing import Literal

from sparkrack.errors import SpecError
from sparkrack.limits import MemlockLimit
from sparkrack.plan.cpus import CpuPlan, plan_cpus
from sparkrack.plan.fabric import LinkPlan, PingCheck, fabric_sysctls, plan_fabric
from sparkrack.plan.fence import (
    Fence,
    client_networks,
    host_name_problems,
    node_fence,
    rack_networks,
)
from sparkrack.plan.fit import FitReport, plan_fit
from sparkrack.plan.listeners import Listener, node_listeners, refuse_port_clashes
from sparkrack.plan.monitoring import MonitoringPlan, plan_monitoring
from sparkrack.plan.nccl import management_nic, nccl_env, rdma_devices
from sparkrack.plan.parallel import ParallelLayout, hardware_summary, plan_layout
from sparkrack.plan.paths import NodePaths, plan_paths
from sparkrack.plan.perf import DecodeOptions, PerfEstimate, plan_performance
from sparkrack.plan.serving import ServingPlan, engine_env, plan_serving
from sparkrack.plan.weights import StagingInputs, StagingPlan, plan_staging
from sparkrack.spec import ClusterSpec, GpuAccess, NicFunction, RolesSpec, StrictModel

__all__ = ["DecodeOptions", "Estimate", "NodePlan", "Plan", "estimate", "make_plan"]


class NodePlan(StrictModel):
    name: str
    address: str
    hardware: str
    role: Literal["head", "worker"]
    stage: int
    gpus: int  # what Ray is told (`--num-gpus`): the hardware profile's count
    gpu_access: GpuAccess  # how its containers get those GPUs (CDI names), and the toolkit
    ssh_user: str
    ssh_port: int
    ssh_key_path: str
    ssh_known_hosts: str
    management_nic: str
    nics: tuple[NicFunction, ...]  # every NIC function of the hardware, cabled or not
    links: tuple[LinkPlan, ...]  # in apply order; each one up, then its MTU, then its address
    sysctls: dict[str, str]  # set before the links come up, persisted in /etc/sysctl.d
    rdma_devices: tuple[str, ...]  # what NCCL uses
    nccl_env: dict[str, str]
    engine_env: dict[str, str]  # the inference container's whole env, NCCL included
    cpus: CpuPlan
    memlock_limit: MemlockLimit  # what the service user and its containers may lock
    listeners: tuple[Listener, ...]  # every service's socket: nothing else may listen but SSH
    fence: Fence  # who may reach its planned services, on `address` only (plan/fence.py)
    paths: NodePaths  # where the roles put things, for the service user

    def listener(self, key: str) -> Listener:
        """The node's planned socket for a service (listeners.Service.key)."""
        return next(listener for listener in self.listeners if listener.key == key)


def canonical_digest(value: object) -> str:
    """sha256 of `value` as canonical JSON (sorted keys, no spaces): one value, one digest."""
    canonical = json.dumps(value, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


class Plan(StrictModel):
    stack: str
    head_node: str
    fit: FitReport
    layout: ParallelLayout
    nodes: tuple[NodePlan, ...]
    jumbo_pings: tuple[PingCheck, ...]
    rdma_floor_gbps: float  # verification's RDMA write test, one per ping's cable half
    serving: ServingPlan
    staging: StagingPlan | None  # the staged weights' places and routes; None: not staged
    monitoring: MonitoringPlan
    performance: PerfEstimate
    roles: RolesSpec  # the roles' settings (the service user, packages, paths), as validated
    takeover: tuple[str, ...]  # the stacks whose recorded nodes this one may take (plan/claims)

    def digest(self) -> str:
        """sha256 of the canonical JSON: changes exactly when the desired state does."""
        return canonical_digest(self.model_dump(mode="json"))

    def node(self, name: str) -> NodePlan:
        return next(node for node in self.nodes if node.name == name)


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
            )
        )
    serving = plan_serving(spec, layout)
    return Plan(
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
        takeover=spec.takeover,
    )


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

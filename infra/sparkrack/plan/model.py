"""The Plan's models: every node's desired state, as `make_plan` (sparkrack.plan) computes it.

Apart from the planner so that what only reads a Plan (verification, handed the deployed Plan as
JSON) imports the data, not the derivation.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection
from typing import Literal

from sparkrack.plan.containers import ContainerPlan
from sparkrack.plan.cpus import CpuPlan
from sparkrack.plan.fabric import LinkPlan, PingCheck
from sparkrack.plan.fence import Fence
from sparkrack.plan.fit import FitReport
from sparkrack.plan.listeners import Listener
from sparkrack.plan.monitoring import MonitoringPlan
from sparkrack.plan.parallel import ParallelLayout
from sparkrack.plan.paths import NodePaths
from sparkrack.plan.perf import PerfEstimate
from sparkrack.plan.serving import ServingPlan
from sparkrack.plan.weights import StagingPlan
from sparkrack.stackspec import GpuAccess, NicFunction, RolesSpec, StrictModel
from sparkrack.stackspec.roles import ROLE_NAMES, RoleName
from sparkrack.text.limits import MemlockLimit


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
    # Its engine containers in start order (Ray; on the head, then `vllm serve`), as make_plan
    # places them (plan/engine.py): what the inference role runs and verification checks.
    engine_containers: tuple[ContainerPlan, ...]

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
    deploys: tuple[RoleName, ...]  # the roles on every node, in deployment order

    def digest(self) -> str:
        """sha256 of the canonical JSON: changes exactly when the desired state does."""
        return canonical_digest(self.model_dump(mode="json"))

    def node(self, name: str) -> NodePlan:
        return next(node for node in self.nodes if node.name == name)

    def deploying(self, roles: Collection[str]) -> Plan:
        """This Plan with only `roles` on its nodes: a program that deploys part of the roles
        says so here, so that what it exports and verifies is what it deployed."""
        unknown = sorted(set(roles) - set(ROLE_NAMES))
        if unknown:
            raise ValueError(f"no role {unknown}: the roles are {list(ROLE_NAMES)}")
        if "base" not in roles:
            raise ValueError(f"roles {sorted(roles)}: base is needed (the user, the head's trust)")
        deploys = tuple(name for name in ROLE_NAMES if name in roles)
        return self.model_copy(update={"deploys": deploys})

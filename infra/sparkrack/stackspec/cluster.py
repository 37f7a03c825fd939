"""The whole stack: a ClusterSpec holds every part."""

from __future__ import annotations

from pydantic import (
    Field,
)

from sparkrack.stackspec.base import ClientNetwork, StrictModel
from sparkrack.stackspec.fabric import Endpoint, FabricSpec
from sparkrack.stackspec.hardware import HardwareProfile, NicPort
from sparkrack.stackspec.model import ModelSpec
from sparkrack.stackspec.monitoring import CpuPinningSpec, MonitoringSpec
from sparkrack.stackspec.nodes import NodeSpec, SshDefaults
from sparkrack.stackspec.roles import RolesSpec
from sparkrack.stackspec.serving import ServingSpec
from sparkrack.text.spectext import (
    ShortName,
)

MAX_TAKEOVER = 16


class ClusterSpec(StrictModel):
    stack: ShortName
    hardware_profiles: dict[str, HardwareProfile]
    ssh: SshDefaults
    nodes: tuple[NodeSpec, ...] = Field(min_length=1)
    fabric: FabricSpec | None = None
    model: ModelSpec
    serving: ServingSpec
    monitoring: MonitoringSpec = MonitoringSpec()
    cpu_pinning: CpuPinningSpec = CpuPinningSpec()
    roles: RolesSpec = RolesSpec()  # what each role puts where, and as whom
    # The stacks of the same backend whose recorded nodes this stack may take over
    # (plan/claims.py); a handful at most: a takeover is a rack changing hands.
    takeover: tuple[ShortName, ...] = Field(default=(), max_length=MAX_TAKEOVER)
    client_networks: tuple[ClientNetwork, ...] | None = Field(
        default=None,
        min_length=1,
        max_length=64,
        description="where the API, Prometheus and Grafana are used from (the node fence admits "
        "only these and the rack's own nodes); default: the /24 (IPv6: /64) of each node's "
        "management address",
    )

    def hardware(self, node: NodeSpec) -> HardwareProfile:
        return self.hardware_profiles[node.hardware]

    def node(self, name: str) -> NodeSpec:
        return next(node for node in self.nodes if node.name == name)

    def endpoint_port(self, endpoint: Endpoint) -> NicPort:
        """The port an endpoint names, defaulting to its hardware's first. Needs cross_check."""
        profile = self.hardware(self.node(endpoint.node))
        port = profile.port(endpoint.port) if endpoint.port else profile.ports[0]
        assert port is not None, "cross_check rejects endpoints on missing ports"
        return port

"""NCCL environment per node: RoCE over the ports in use, bootstrap on the management NIC.

Seed 001 and NVIDIA's two-Spark recipe. Never NCCL_IB_DISABLE: it forced TCP sockets and cost 58%
(the spec refuses a stack that sets it).
"""

from __future__ import annotations

import re

from sparkrack.plan.fabric import FabricPlan
from sparkrack.stackspec import ClusterSpec, NodeSpec

ROCE_V2_GID_INDEX = "3"  # the IPv4-mapped RoCEv2 GID
QPS_PER_CONNECTION = "4"


def management_nic(spec: ClusterSpec, node: NodeSpec) -> str:
    return node.overrides.management_nic or spec.hardware(node).management_nic


def rdma_devices(spec: ClusterSpec, node: NodeSpec, fabric: FabricPlan) -> tuple[str, ...]:
    """Both PCIe halves of every port NCCL uses, in port order."""
    profile = spec.hardware(node)
    in_use = fabric.nccl_ports[node.name]
    return tuple(
        f.rdma_device
        for port in profile.ports
        if port.name in in_use
        for f in port.functions
        if f.rdma_device
    )


def merge_nics(devices: tuple[str, ...]) -> str:
    """NCCL (2.21+, its net_ib virtual devices) merges the ports of one PCI device, functions
    of one bus and slot such as rocep1s0f0 with rocep1s0f1, into one virtual NIC and stripes its
    queue pairs over them. The two PCIe halves of a GB10 port sit on different PCI domains
    (rocep1s0f0, roceP2p1s0f0): one port per node merges nothing, and seed 001's 1 stays. A ring
    node lists a port per neighbour; merged, one neighbour's traffic would go half over the other
    neighbour's cable, where no queue pair connects: 0."""
    adapters = [re.sub(r"f\d+$", "", device) for device in devices]
    return "0" if len(set(adapters)) < len(adapters) else "1"


def nccl_env(spec: ClusterSpec, node: NodeSpec, fabric: FabricPlan) -> dict[str, str]:
    env = {
        "NCCL_SOCKET_IFNAME": management_nic(spec, node),
        # INFO with INIT,NET prints the "NET/IB : Using [0]rocep1s0f0:1/RoCE ..." line that
        # verification reads to confirm the transport, without the per-call noise.
        "NCCL_DEBUG": "INFO",
        "NCCL_DEBUG_SUBSYS": "INIT,NET",
    }
    devices = rdma_devices(spec, node, fabric)
    if not devices:
        return env
    env |= {
        "NCCL_IB_HCA": ",".join(devices),
        "NCCL_IB_MERGE_NICS": merge_nics(devices),
        "NCCL_CROSS_NIC": "1" if fabric.crossed else "0",
        "NCCL_IB_GID_INDEX": ROCE_V2_GID_INDEX,
        "NCCL_IB_QPS_PER_CONNECTION": QPS_PER_CONNECTION,
    }
    if fabric.multi_peer:  # a ring: each neighbour sits on its own subnet
        env["NCCL_IB_SUBNET_AWARE_ROUTING"] = "1"
    return env

"""A simulated rack is read from its stack, through the same spec and plan as a real one.

The simulator builds what the Plan says the nodes are: their management addresses, every NIC
function of their hardware profile, and the cables or switch ports their links name. The code
paths are the stacks' own; what makes a stack simulated is a declared fact, its nodes' hardware
profile. The simulator refuses any other, so that it never builds a rack on a real stack's
(possibly private, possibly in use) addresses.
"""

from __future__ import annotations

import ipaddress
from collections import defaultdict
from pathlib import Path

from sparkrack.config.load import load_stack_file
from sparkrack.plan import Plan, make_plan
from sparkrack.plan.fabric import rail_address
from sparkrack.sim.shell import SimError
from sparkrack.sim.topology import SimCable, SimLease, SimNode, SimSwitch, SimTopology


def topology_for_stack(stack: str, stacks_dir: Path | None = None) -> SimTopology:
    return topology_from_plan(make_plan(load_stack_file(stack, stacks_dir)))


SIMULATED_HARDWARE = "gb10-sim"


def topology_from_plan(plan: Plan) -> SimTopology:
    for node in plan.nodes:
        if node.hardware != SIMULATED_HARDWARE:
            raise SimError(
                f"stack {plan.stack}: node {node.name} is hardware {node.hardware!r}; the "
                f"simulator builds only {SIMULATED_HARDWARE!r} nodes (see stacks/Pulumi.sim-2.yaml)"
            )
    nodes = tuple(
        SimNode(
            name=node.name,
            mgmt_address=node.address,
            netdevs=tuple(nic.netdev for nic in node.nics),
            rdma_devices=tuple(nic.rdma_device for nic in node.nics if nic.rdma_device),
        )
        for node in plan.nodes
    )
    return SimTopology(
        stack=plan.stack,
        nodes=nodes,
        cables=_cables(plan),
        switch=_switch(plan),
        mgmt_subnet=_management_subnet(plan),
    )


def _cables(plan: Plan) -> tuple[SimCable, ...]:
    """Each cable once, from the end of the node that comes first in the stack."""
    order = [node.name for node in plan.nodes]
    cables = []
    for node in plan.nodes:
        for link in node.links:
            if link.peer_node is None or link.peer_netdev is None:
                continue
            if order.index(link.peer_node) > order.index(node.name):
                cables.append(SimCable(node.name, link.netdev, link.peer_node, link.peer_netdev))
    return tuple(cables)


def _switch(plan: Plan) -> SimSwitch | None:
    names = {link.switch for node in plan.nodes for link in node.links if link.switch}
    if not names:
        return None
    if len(names) > 1:
        found = ", ".join(sorted(names))
        raise SimError(f"stack {plan.stack}: the simulator builds one switch, found {found}")
    ports: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for node in plan.nodes:
        for link in node.links:
            if link.switch_port is not None:
                ports[link.switch_port].append((node.name, link.netdev))
    return SimSwitch(
        name=names.pop(),
        ports=tuple((port, tuple(plugged)) for port, plugged in sorted(ports.items())),
        leases=_leases(plan),
    )


def _leases(plan: Plan) -> tuple[SimLease, ...]:
    """The switch's DHCP server, as its operator would set it up for the stack: each port leased,
    by its MAC, the address static addressing would give it in its rail's /24."""
    leases = []
    for position, node in enumerate(plan.nodes):
        for link in (link for link in node.links if link.addressing == "dhcp"):
            if link.network is None:
                raise SimError(
                    f"stack {plan.stack}: the simulated DHCP server leases from fabric.subnet, "
                    "which the stack does not declare"
                )
            address = rail_address(ipaddress.IPv4Network(link.network), position)
            leases.append(SimLease(node.name, link.netdev, address))
    return tuple(leases)


def _management_subnet(plan: Plan) -> str:
    """The /24 holding the first node's address; every node must be in it, as on one switch."""
    subnet = ipaddress.ip_network(f"{plan.nodes[0].address}/24", strict=False)
    for node in plan.nodes:
        if ipaddress.ip_address(node.address) not in subnet:
            raise SimError(
                f"stack {plan.stack}: node {node.name} address {node.address} is outside "
                f"{subnet}, the simulated management network of {plan.nodes[0].name}"
            )
    return str(subnet)

"""Every node listens only where the Plan says: each service on its planned address (the
management one), nothing on the fabric or another network, and nothing on every address but the
operator's SSH and the Ray servers the Plan declares so (this Ray binds them everywhere); the
node's fence answers every planned service on the planned address only, to the rack's nodes and,
for the API and the dashboards, the stack's client networks (plan/fence.py)."""

from __future__ import annotations

import ipaddress
from typing import Any

from sparkrack.facts.nft import nft_table
from sparkrack.facts.perftest import write_bw_ports
from sparkrack.facts.sockets import listening
from sparkrack.plan.fence import FENCE_TABLE
from sparkrack.plan.listeners import WILDCARDS, Listener
from sparkrack.verify.checks.readings import read
from sparkrack.verify.checks.subjects import Node, needs
from sparkrack.verify.inventory import Inventory

ROLES = ("base",)


def loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return address == "localhost"


def planned(inventory: Inventory, node: Node) -> list[Listener]:
    """The listeners of the roles this build deploys (monitoring only when the stack has it)."""

    def deployed(role: str) -> bool:
        enabled = role != "monitoring" or inventory.plan.monitoring.enabled
        return role in inventory.roles and enabled

    return [listener for listener in node.node.listeners if deployed(listener.role)]


def test_nothing_listens_beyond_the_plan(host: Any, inventory: Inventory, node: Node) -> None:
    listeners, ssh_port = planned(inventory, node), node.node.ssh_port
    # The RDMA write test of another node's check may be serving here for its few seconds.
    own_tests = write_bw_ports(len(inventory.plan.jumbo_pings))
    sockets = read(host, listening())
    unplanned = sorted(
        f"{address}:{port}"
        for address, port in sockets
        if not loopback(address)
        and port != ssh_port  # the operator's sshd, not sparkrack's
        and port not in own_tests
        and not any(listener.holds(address, port) for listener in listeners)
        and (address in WILDCARDS or address != node.node.address)
    )
    assert not unplanned, (
        f"listening where the Plan puts nothing: {', '.join(unplanned)} (every service of this "
        f"node belongs on {node.node.address} only)"
    )


def test_each_service_listens_on_its_planned_address(
    host: Any, inventory: Inventory, node: Node
) -> None:
    sockets = read(host, listening())
    missing = sorted(
        f"{listener.service} on {listener.host_port}"
        for listener in planned(inventory, node)
        if listener.always and not any(listener.holds(a, p) for a, p in sockets)
    )
    assert not missing, f"not listening: {'; '.join(missing)}"


@needs("inference")
def test_the_node_fence_is_the_plans(host: Any, node: Node) -> None:
    fence = node.node.fence
    live = read(host, nft_table("inet", FENCE_TABLE))
    assert live is not None, (
        f"no nftables table inet {FENCE_TABLE}: Ray's GCS, node and object managers and workers "
        f"answer on every address of this node, the fabric's included, and the API and the "
        f"exporters answer anyone on the management network (up loads it)"
    )
    assert list(live) == list(fence.rules), (
        f"table inet {FENCE_TABLE} is not the Plan's: holds {list(live)}, the Plan's is "
        f"{list(fence.rules)} (the planned services answer only on {fence.address}, to the "
        f"rack and its client networks; up reloads it)"
    )

"""Which nodes a deployed stack holds (its claims, a small output of every `up`), and which of
them another stack's Plan would take: pure, so that the program and `sparkrack plan` judge alike.

A node is claimed by its management address, the one name of a box that two stacks of a backend
can compare: every stack deploys its base role (the service user, /etc/hosts, trust) on every
node it names, so two stacks naming one address would reconfigure each other's rack. A node's
cable ends and fabric addresses go with it (a cable map names the stack's own nodes only), and
are no identity of their own: node names, cable ends (`spark-1:port0`) and fabric subnets repeat
in racks that never meet (sim-2 and gb10-2 name the same ones).
"""

from __future__ import annotations

from collections.abc import Mapping

from sparkrack.plan import Plan
from sparkrack.stackspec import StrictModel
from sparkrack.stackspec.errors import Problem, SpecError


class NodeClaim(StrictModel):
    name: str  # the node's name in the claiming stack, for the refusal
    address: str  # its management address: what is compared


class Claims(StrictModel):
    """What a stack's last `up` recorded as its own (the `claims` output)."""

    nodes: tuple[NodeClaim, ...]


def plan_claims(plan: Plan) -> Claims:
    return Claims(nodes=tuple(NodeClaim(name=n.name, address=n.address) for n in plan.nodes))


def same_node(address: str) -> str:
    """An address as compared: a host name in any case, with or without its root dot, is one."""
    return address.lower().rstrip(".")


def claimed_problems(plan: Plan, others: Mapping[str, Claims]) -> list[Problem]:
    """One problem per node of the Plan that another stack (not one it takes over) claims."""
    held: dict[str, list[tuple[str, NodeClaim]]] = {}
    for stack, claims in sorted(others.items()):
        if stack == plan.stack or stack in plan.takeover:
            continue
        for claim in claims.nodes:
            held.setdefault(same_node(claim.address), []).append((stack, claim))
    return [
        Problem(
            f"nodes[{i}] ({node.name}).address",
            f"{node.address} is claimed by stack {stack} (its {claim.name}): an `up` would"
            f" reconfigure that rack; add {stack} to `takeover` to take the node over",
            node.name,
        )
        for i, node in enumerate(plan.nodes)
        for stack, claim in held.get(same_node(node.address), [])
    ]


def refuse_claimed(plan: Plan, others: Mapping[str, Claims]) -> None:
    """Refuses a Plan that names a node another stack of the backend claims."""
    if problems := claimed_problems(plan, others):
        raise SpecError(plan.stack, problems)

"""What every role shares: its templates, its type token, and how a worker reaches the head."""

from __future__ import annotations

import string
from pathlib import Path

from sparkrack.plan import NodePlan, Plan
from sparkrack.plan.fabric import Reach, reach_over_fabric
from sparkrack.resources.podman import Image, ShipFrom
from sparkrack.transport.target import Target

ROLES = Path(__file__).resolve().parent


def render(role: str, template: str, **values: object) -> str:
    """roles/<role>/templates/<template> with its `$placeholders` filled; a missing one raises."""
    text = (ROLES / role / "templates" / template).read_text()
    return string.Template(text).substitute({key: str(value) for key, value in values.items()})


def token(role: str) -> str:
    """The Pulumi type token of a role's component: sparkrack:roles:<Name>."""
    return f"sparkrack:roles:{role.title().replace('_', '')}"


def fabric_reach(origin: NodePlan, node: NodePlan) -> Reach:
    """How `origin` reaches `node` on a rail they share (shipping goes over the fabric); by its
    management address when they share none."""
    return reach_over_fabric(origin.links, node.links, node.address)


def ship_from_head(plan: Plan, node: NodePlan, head_image: Image, head: Target) -> ShipFrom:
    """How a worker gets an image the head (reached as `head`) holds: over the fabric, with the
    head's trust key."""
    to = fabric_reach(plan.node(plan.head_node), node)
    key = plan.roles.base.trust_key_name
    return ShipFrom(head_image, head, to.address, key, to.lease_netdev)

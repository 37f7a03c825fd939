"""What every role shares: its templates, its type token, and how a worker reaches the head."""

from __future__ import annotations

import string
from pathlib import Path

from sparkrack.plan import NodePlan, Plan
from sparkrack.plan.fabric import shared_address
from sparkrack.resources.podman import Image, ShipFrom
from sparkrack.ssh import Target

ROLES = Path(__file__).resolve().parent


def render(role: str, template: str, **values: object) -> str:
    """roles/<role>/templates/<template> with its `$placeholders` filled; a missing one raises."""
    text = (ROLES / role / "templates" / template).read_text()
    return string.Template(text).substitute({key: str(value) for key, value in values.items()})


def token(role: str) -> str:
    """The Pulumi type token of a role's component: sparkrack:roles:<Name>."""
    return f"sparkrack:roles:{role.title().replace('_', '')}"


def fabric_address(origin: NodePlan, node: NodePlan) -> str:
    """`node`'s address on a link it shares with `origin` (shipping goes over the fabric); its
    management address when they share none (DHCP, or no fabric)."""
    return shared_address(origin.links, node.links, node.address)


def ship_from_head(plan: Plan, node: NodePlan, head_image: Image) -> ShipFrom:
    """How a worker gets an image the head holds: over the fabric, with the head's trust key."""
    origin = plan.node(plan.head_node)
    return ShipFrom(
        head_image,
        Target.for_node(origin),
        fabric_address(origin, node),
        plan.roles.base.trust_key_name,
    )

"""What the checks are parametrized over: each subject names its node and its test id."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from sparkrack.verify.inventory import (
    CableView,
    ContainerView,
    Inventory,
    LinkView,
    NodeView,
)


@dataclass(frozen=True)
class Node:
    node: NodeView

    @property
    def id(self) -> str:
        return self.node.name


@dataclass(frozen=True)
class Link:
    node: NodeView
    link: LinkView

    @property
    def id(self) -> str:
        return f"{self.node.name}-{self.link.netdev}"


@dataclass(frozen=True)
class Cable:
    node: NodeView  # where the ping starts
    peer: NodeView
    cable: CableView

    @property
    def id(self) -> str:
        return f"{self.node.name}-{self.cable.from_netdev}"


@dataclass(frozen=True)
class Rdma:
    node: NodeView
    device: str

    @property
    def id(self) -> str:
        return f"{self.node.name}-{self.device}"


@dataclass(frozen=True)
class Container:
    node: NodeView
    container: ContainerView

    @property
    def id(self) -> str:
        return f"{self.node.name}-{self.container.name}"


Subject = Node | Link | Cable | Rdma | Container


def subjects(inventory: Inventory) -> dict[str, list[Any]]:
    """Fixture name -> its values. `api` and `prometheus` are the one node serving each."""
    nodes = inventory.nodes
    return {
        "node": [Node(node) for node in nodes],
        "link": [Link(node, link) for node in nodes for link in node.links],
        "cable": [
            Cable(inventory.node(c.from_node), inventory.node(c.to_node), c)
            for c in inventory.cables
        ],
        "rdma": [Rdma(node, device) for node in nodes for device in node.rdma.devices],
        "container": [Container(node, c) for node in nodes for c in node.podman.containers],
        "api": [Node(inventory.node(inventory.inference.api_node))],
        "prometheus": [Node(inventory.node(inventory.monitoring.prometheus_node))],
    }


F = TypeVar("F", bound=Callable[..., None])


def needs(*roles: str) -> Callable[[F], F]:
    """The roles whose work a check reads; a module's ROLES apply to all of its checks."""

    def mark(check: F) -> F:
        check.roles = roles  # type: ignore[attr-defined]
        return check

    return mark


def roles_of(check: object, module: object) -> tuple[str, ...]:
    return (*getattr(module, "ROLES", ()), *getattr(check, "roles", ()))


def subject_node(params: Iterable[object]) -> str | None:
    """The node of the first parameter that is a subject."""
    for value in params:
        node = getattr(value, "node", None)
        if isinstance(node, NodeView):
            return node.name
    return None


class Hosts:
    """node name -> testinfra host, opened on first use."""

    def __init__(self, connect: Callable[[str], Any]) -> None:
        self._connect = connect
        self._hosts: dict[str, Any] = {}

    def __getitem__(self, name: str) -> Any:
        if name not in self._hosts:
            self._hosts[name] = self._connect(name)
        return self._hosts[name]

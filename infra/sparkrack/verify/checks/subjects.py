"""What the checks are parametrized over: the Plan's own models, each subject naming its node
and its test id."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import pytest

from sparkrack.plan.containers import ContainerPlan
from sparkrack.plan.exporters import exporter_containers
from sparkrack.plan.fabric import LinkPlan, PingCheck
from sparkrack.plan.model import NodePlan
from sparkrack.verify.inventory import Inventory, cabled_rdma_devices, service_user


@dataclass(frozen=True)
class Node:
    node: NodePlan
    user: str  # the service user: its rootless Podman holds the node's containers

    @property
    def id(self) -> str:
        return self.node.name


@dataclass(frozen=True)
class Link:
    node: NodePlan
    link: LinkPlan

    @property
    def id(self) -> str:
        return f"{self.node.name}-{self.link.netdev}"


@dataclass(frozen=True)
class Cable:
    node: NodePlan  # where the ping starts
    peer: NodePlan
    cable: PingCheck

    @property
    def id(self) -> str:
        return f"{self.node.name}-{self.cable.from_netdev}"


@dataclass(frozen=True)
class Rdma:
    node: NodePlan
    device: str
    netdev: str  # the port its RoCE GIDs belong to

    @property
    def id(self) -> str:
        return f"{self.node.name}-{self.device}"


@dataclass(frozen=True)
class Container:
    node: NodePlan
    user: str
    container: ContainerPlan

    @property
    def id(self) -> str:
        return f"{self.node.name}-{self.container.name}"


Subject = Node | Link | Cable | Rdma | Container


def subjects(inventory: Inventory) -> dict[str, list[Any]]:
    """Fixture name -> its values. `api` and `prometheus` are the one node serving each."""
    plan, user = inventory.plan, service_user(inventory.plan)
    nodes = plan.nodes
    return {
        "node": [Node(node, user) for node in nodes],
        "link": [Link(node, link) for node in nodes for link in node.links],
        "cable": [Cable(plan.node(c.from_node), plan.node(c.to_node), c) for c in plan.jumbo_pings],
        "rdma": [
            Rdma(node, device, netdev)
            for node in nodes
            for device, netdev in cabled_rdma_devices(node).items()
        ],
        # The engine's containers, and the exporters every node runs beside them.
        "container": [Container(node, user, c) for node in nodes for c in node.engine_containers],
        "exporter": [
            Container(node, user, c)
            for node in nodes
            for c in exporter_containers(plan, node, node.paths.monitoring)
        ],
        "api": [Node(plan.node(plan.serving.api_node), user)],
        "prometheus": [Node(plan.node(plan.monitoring.prometheus_node), user)],
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
        if isinstance(node, NodePlan):
            return node.name
    return None


class Hosts:
    """node name -> testinfra host, opened on first use. A node that does not answer is said
    once by `sparkrack verify`; a check on another node that needs it fails in one plain line
    (not the dump of a command SSH could not run)."""

    def __init__(
        self, connect: Callable[[str], Any], unavailable: Mapping[str, str] | None = None
    ) -> None:
        self._connect = connect
        self._hosts: dict[str, Any] = {}
        self._unavailable = dict(unavailable or {})

    def __getitem__(self, name: str) -> Any:
        if name in self._unavailable:
            pytest.fail(f"needs {name}, which does not answer (its line says why)", pytrace=False)
        if name not in self._hosts:
            self._hosts[name] = self._connect(name)
        return self._hosts[name]

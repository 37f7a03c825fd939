"""How the checks read a node: a fact (sparkrack.facts) through testinfra's host, the same
command and parser a resource uses; no check parses node output itself."""

from __future__ import annotations

from typing import Any, TypeVar

from sparkrack.facts import Fact
from sparkrack.facts.podman import container

T = TypeVar("T")


def read(host: Any, fact: Fact[T]) -> T:
    """A fact read through testinfra's host: the same command and parser a resource uses."""
    if fact.stdin is not None:
        raise ValueError(f"testinfra cannot feed stdin to `{fact.command}`")
    if fact.sudo:
        with host.sudo():
            return fact.parse(host.check_output(fact.command))
    return fact.parse(host.check_output(fact.command))


def read_as_service_user(host: Any, user: str, fact: Fact[T]) -> T:
    """A fact read as the service user: its rootless Podman holds the containers."""
    return read(host, fact.as_user(user))


def container_record(host: Any, user: str, name: str) -> dict[str, Any]:
    """The container's inspect record, read with the fact a Container resource reads it with."""
    record = read_as_service_user(host, user, container(name))
    assert record is not None, f"no container {name} for user {user}"
    return record

"""Podman as the service user: its rootless storage is where the cluster's containers live."""

from __future__ import annotations

from typing import Any

from sparkrack.facts.podman import parse_container
from sparkrack.verify.inventory import NodeView


def podman(host: Any, node: NodeView, command: str, *args: str) -> Any:
    """Run `podman COMMAND` as the service user (directly when SSH logs in as that user)."""
    user = node.podman.service_user
    if user == node.ssh.user:
        return host.run(f"podman {command}", *args)
    uid = host.check_output("id -u %s", user)
    return host.run(
        f"sudo -n -u %s env XDG_RUNTIME_DIR=/run/user/%s podman {command}", user, uid, *args
    )


def inspect_container(host: Any, node: NodeView, name: str) -> dict[str, Any]:
    """The container's inspect record, parsed by the fact a Container resource reads it with."""
    result = podman(host, node, "container inspect %s", name)
    record = parse_container(result.stdout) if result.rc == 0 else None
    assert record is not None, f"no container {name} for user {node.podman.service_user}"
    return record

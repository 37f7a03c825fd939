"""The podman role: rootless configuration for the service user; Image and Container helpers.

Image and Container (sparkrack.resources.podman) are used by the roles that run containers; this
role gives them what they stand on: the user's containers.conf, storage.conf and registries.conf.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pulumi

from roles.common import render, token
from sparkrack.plan import NodePlan
from sparkrack.resources.files import RemoteFile, RemoteFileArgs
from sparkrack.stackspec.roles import PodmanRoleSpec
from sparkrack.transport.target import Target

ROLE = "podman"
CONFIG_FILES = ("containers.conf", "storage.conf", "registries.conf")


def toml_list(values: list[str]) -> str:
    return json.dumps(values)  # a JSON list of strings is a TOML array


def config_content(name: str, user: str, settings: PodmanRoleSpec) -> str:
    return render(
        ROLE,
        name,
        user=user,
        runtime=settings.runtime,
        ulimits=toml_list(list(settings.default_ulimits)),
        driver=settings.storage_driver,
        registries=toml_list(list(settings.unqualified_search_registries)),
    )


@dataclass(frozen=True)
class PodmanArgs:
    node: NodePlan
    target: Target  # how the program reaches the node
    user: str  # the service user, whose rootless Podman this configures
    home: str
    settings: PodmanRoleSpec  # the Plan's roles.podman


class Podman(pulumi.ComponentResource):
    """One node's rootless Podman configuration. Output: runtime."""

    def __init__(
        self, name: str, args: PodmanArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(token(ROLE), name, None, opts)
        node, user, home, settings = args.node, args.user, args.home, args.settings
        target, child = args.target, pulumi.ResourceOptions(parent=self)
        # One after the other: the first makes ~/.config/containers and records it, and is
        # deleted last, when the directory is empty again (destroy runs in reverse order).
        for name in CONFIG_FILES:
            path, content = (
                f"{home}/.config/containers/{name}",
                config_content(name, user, settings),
            )
            config = RemoteFileArgs(target, path, content, owner=user, group=user)
            made = RemoteFile(f"{node.name}-{name.replace('.', '-')}", config, child)
            child = pulumi.ResourceOptions(parent=self, depends_on=[made])
        self.runtime = args.settings.runtime
        self.register_outputs({"runtime": self.runtime})

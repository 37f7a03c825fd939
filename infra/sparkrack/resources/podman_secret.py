"""PodmanSecret: a secret in the service user's Podman, created from stdin.

The value travels from a Pulumi secret over SSH's stdin into `podman secret create`: it is never
on a command line, in a unit file or in a file sparkrack writes, and its input and output are
secrets in the state (encrypted). Read reports only whether the secret exists: Podman does not
show the value back without `--showsecret`, and a hash of a short secret would leak it.
"""

from __future__ import annotations

import shlex
from typing import Any, ClassVar

import pulumi

from sparkrack import ssh
from sparkrack.facts import gather
from sparkrack.facts.podman import secret_id
from sparkrack.resources.base import PULUMI_MODULE, Live, NodeProvider, NodeResource, Props
from sparkrack.resources.podman import podman
from sparkrack.ssh import Target, as_user


class PodmanSecretProvider(NodeProvider):
    INPUTS: ClassVar[tuple[str, ...]] = ("user", "name", "value")
    STATE: ClassVar[tuple[str, ...]] = ()
    REPLACE: ClassVar[tuple[str, ...]] = ("user", "name")

    def identity(self, props: Props) -> str:
        return f"podman secret {props['name']} of {props['user']}"

    def observe(self, target: Target, props: Props) -> Live | None:
        found = gather(target, secret_id(str(props["name"])).as_user(str(props["user"])))
        return {} if found else None

    def apply(self, target: Target, props: Props, live: Live | None) -> dict[str, Any]:
        # --replace keeps the secret's name for the containers that use it (Podman >= 4.7).
        script = podman(
            str(props["user"]), "secret", "create", "--replace", str(props["name"]), "-"
        )
        ssh.run(target, script, stdin=str(props["value"]))
        return {}

    def remove(self, target: Target, props: Props) -> None:
        name = shlex.quote(str(props["name"]))
        ssh.run(target, as_user(str(props["user"]), f"podman secret rm {name} || true"))


class PodmanSecret(NodeResource, module=PULUMI_MODULE, name="PodmanSecret"):
    """A podman secret of `user` on one node, its value a Pulumi secret."""

    def __init__(
        self,
        name: str,
        target: Target,
        user: str,
        secret: str,
        value: pulumi.Input[str],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        props = {"user": user, "name": secret, "value": pulumi.Output.secret(value)}
        super().__init__(
            PodmanSecretProvider(), name, target, props, opts, secret_outputs=("value",)
        )

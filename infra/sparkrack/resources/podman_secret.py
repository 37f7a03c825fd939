"""PodmanSecret: a secret in the service user's Podman, created from stdin, kept in memory.

The value travels from a Pulumi secret over SSH's stdin into `podman secret create`: it is never
on a command line, in a unit file or in a file sparkrack writes, and its input and output are
secrets in the state (encrypted). On the node Podman keeps it in the user's runtime directory (a
tmpfs: facts.podman.SECRET_STORE), not on disk where its default driver would. Read reports only
where the value is, never the value: Podman does not show it back without `--showsecret`, and a
hash of a short secret would leak it. A reboot clears the runtime directory: the secret then
reads as not in memory, `preview` shows it and `up` hands the value over again. A container
reads a secret when it starts: `changed_at` (Unix time of the last change of value, 0 before any)
is what restarts the one that reads it; a value handed over again is not a change.
"""

from __future__ import annotations

import shlex
import time
from typing import Any, ClassVar

import pulumi
from pulumi.dynamic import UpdateResult

from sparkrack.asking import gather
from sparkrack.facts.podman import SECRET_STORE, secret_place
from sparkrack.resources.base import PULUMI_MODULE, Live, NodeProvider, NodeResource, Props
from sparkrack.text.commands import as_user
from sparkrack.transport import ssh
from sparkrack.transport.target import Target


def create_script(name: str, live: Live | None) -> str:
    """The secret (re)made in SECRET_STORE from stdin. One kept elsewhere is removed first, its
    value with it (a replace into another store leaves the old value where it was); one of ours
    whose value was lost is replaced in place (--replace: containers keep using the name)."""
    quoted = shlex.quote(name)
    remove = (
        f"podman secret rm {quoted} >/dev/null && " if live and live["place"] == "on-disk" else ""
    )
    store = f"--driver file --driver-opts path={SECRET_STORE}"
    return (
        f"mkdir -p -m 0700 {SECRET_STORE} && {remove}"
        f"podman secret create --replace {store} {quoted} - >/dev/null"
    )


class PodmanSecretProvider(NodeProvider):
    INPUTS: ClassVar[tuple[str, ...]] = ("user", "name", "value", "in_memory")
    STATE: ClassVar[tuple[str, ...]] = ("in_memory",)
    SECRET: ClassVar[tuple[str, ...]] = ("value",)
    REPLACE: ClassVar[tuple[str, ...]] = ("user", "name")

    def identity(self, props: Props) -> str:
        return f"podman secret {props['name']} of {props['user']}"

    def observe(self, target: Target, props: Props) -> Live | None:
        place = gather(target, secret_place(str(props["name"])).as_user(str(props["user"])))
        return None if place is None else {"in_memory": place == "stored", "place": place}

    def apply(self, target: Target, props: Props, live: Live | None) -> dict[str, Any]:
        script = create_script(str(props["name"]), live)
        ssh.run(target, as_user(str(props["user"]), script), stdin=str(props["value"]))
        return {}

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        result = super().update(_id, olds, news)
        changed = olds.get("value") != news["value"]
        changed_at = time.time() if changed else olds.get("changed_at") or 0.0
        result.outs = {**(result.outs or {}), "changed_at": changed_at}
        return result

    def remove(self, target: Target, props: Props) -> None:
        name = shlex.quote(str(props["name"]))
        ssh.run(target, as_user(str(props["user"]), f"podman secret rm {name} || true"))


class PodmanSecret(NodeResource, module=PULUMI_MODULE, name="PodmanSecret"):
    """A podman secret of `user` on one node, its value a Pulumi secret kept in memory there.
    Output: changed_at, when its value last changed (0 before any change)."""

    changed_at: pulumi.Output[float]

    def __init__(
        self,
        name: str,
        target: Target,
        user: str,
        secret: str,
        value: pulumi.Input[str],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        props = {
            "user": user,
            "name": secret,
            "value": pulumi.Output.secret(value),
            "in_memory": True,
            "changed_at": 0.0,
        }
        super().__init__(
            PodmanSecretProvider(), name, target, props, opts, secret_outputs=("value",)
        )

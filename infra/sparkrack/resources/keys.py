"""SSH trust between nodes: a key pair made on a node, and a node's host keys as sshd serves them.

The private key is generated on the node and never leaves it: only the public key is an output.
Host keys are read through our own pinned connection, so the head's known_hosts entries for its
peers are as trustworthy as the operator's pin, with no trust-on-first-use.
"""

from __future__ import annotations

import shlex
from typing import Any

import pulumi

from sparkrack.asking import gather
from sparkrack.facts.keys import host_keys, key_file, user_public_key
from sparkrack.resources.base import PULUMI_MODULE, Live, NodeProvider, NodeResource, Props
from sparkrack.text.commands import as_user
from sparkrack.transport import ssh
from sparkrack.transport.target import Target


class SshKeyProvider(NodeProvider):
    INPUTS = ("user", "key_name")
    STATE = ()
    REPLACE = ("user", "key_name")

    def identity(self, props: Props) -> str:
        return f"ssh key {props['key_name']} of {props['user']}"

    def observe(self, target: Target, props: Props) -> Live | None:
        fact = user_public_key(str(props["key_name"])).as_user(str(props["user"]))
        public = gather(target, fact)
        return {"public_key": public} if public else None

    def apply(self, target: Target, props: Props, live: Live | None) -> dict[str, Any]:
        if live is not None:
            return {}
        key, comment = key_file(str(props["key_name"])), f"sparkrack@{target.node}"
        script = (
            f"umask 077; mkdir -p .ssh; rm -f {key} {key}.pub; "
            f"ssh-keygen -q -t ed25519 -N '' -C {shlex.quote(comment)} -f {key}"
        )
        ssh.run(target, as_user(str(props["user"]), script))
        return {}

    def remove(self, target: Target, props: Props) -> None:
        key = key_file(str(props["key_name"]))
        ssh.run(target, as_user(str(props["user"]), f"rm -f {key} {key}.pub"))


class SshKey(NodeResource, module=PULUMI_MODULE, name="SshKey"):
    """An ed25519 key pair in the user's ~/.ssh on one node. Output: public_key."""

    public_key: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        target: Target,
        user: str,
        key_name: str,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        props = {"user": user, "key_name": key_name, "public_key": None}
        super().__init__(SshKeyProvider(), name, target, props, opts)


class HostKeysProvider(NodeProvider):
    """Read-only: create and delete change nothing on the node."""

    INPUTS = ()
    STATE = ()
    REPLACE = ()

    def identity(self, props: Props) -> str:
        return "ssh host keys"

    def observe(self, target: Target, props: Props) -> Live | None:
        served = gather(target, host_keys())
        return {"host_keys": list(served)}

    def apply(self, target: Target, props: Props, live: Live | None) -> dict[str, Any]:
        return {}

    def remove(self, target: Target, props: Props) -> None:
        return None


class HostKeys(NodeResource, module=PULUMI_MODULE, name="HostKeys"):
    """The node's SSH host public keys ('type base64'), read over the pinned connection."""

    host_keys: pulumi.Output[list[str]]

    def __init__(
        self, name: str, target: Target, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(HostKeysProvider(), name, target, {"host_keys": None}, opts)

"""Who a transport reaches and what it says back: a node's address and credentials (`Target`),
a command's result, the errors every caller tells apart, and the root form of a command
(`sudo_wrap`; a user's form, `as_user`, is pure text in sparkrack.text.commands).

Key-free and connection-free, so that resources carry a `Target` in their inputs without opening
anything; `ssh.py` is the connection that uses them.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Protocol

from sparkrack.text.commands import UNKNOWN_USER


class Reachable(Protocol):
    """What SSH needs to know of a node (a NodePlan is one): this module knows hosts, not Plans."""

    @property
    def name(self) -> str: ...
    @property
    def address(self) -> str: ...
    @property
    def ssh_port(self) -> int: ...
    @property
    def ssh_user(self) -> str: ...
    @property
    def ssh_key_path(self) -> str: ...
    @property
    def ssh_known_hosts(self) -> str: ...


class SshError(Exception):
    """A node could not be reached, refused our key or its host key, or a command failed."""


class Unreachable(SshError):
    """No connection to the node at all (down, or the network to it): nothing was learnt."""


class HostKeyRefused(SshError):
    """The node answered with a host key that is not the pinned one: nothing was sent to it, and
    it is not asked again by this process (each try would cost the node's sshd a penalty)."""


class LoginRefused(SshError):
    """The node's sshd answered, and the login failed (the key refused, or the key file not
    usable here): the node is there, so nothing sparkrack knows of it is forgotten."""


class NoSuchUser(SshError):
    """A command run as another account (`sudo -u`) that the node does not have: whatever that
    account owned on the node is gone with it (a reinstalled or re-imaged node)."""


# What a node that cannot be used this run raises: nothing on it was read or changed.
NODE_UNAVAILABLE = (Unreachable, HostKeyRefused, LoginRefused)


@dataclass(frozen=True)
class Target:
    """How to reach one node. Small and key-free: it travels in every resource's inputs."""

    node: str
    host: str
    port: int
    user: str
    key_path: str
    known_hosts: str
    # Why a resource of the whole rack (the engine across its nodes) stands still this run: a
    # node it needs does not answer. Set on those resources' targets only; "" nearly always.
    standing: str = ""

    def where(self) -> str:
        return f"node {self.node} ({self.host})"

    def standing_still(self, reason: str) -> Target:
        """This target, marked with `reason` ("" leaves it unmarked)."""
        return replace(self, standing=reason)

    def connection_props(self) -> dict[str, Any]:
        """Everything but the node's name, which resources carry as their own `node` input; the
        standing reason only when there is one (every other resource's inputs stay as they were)."""
        props = asdict(self)
        del props["node"]
        if not self.standing:
            del props["standing"]
        return props

    @classmethod
    def from_props(cls, node: str, connection: Mapping[str, Any]) -> Target:
        return cls(
            node=node,
            host=str(connection["host"]),
            port=int(connection["port"]),
            user=str(connection["user"]),
            key_path=str(connection["key_path"]),
            known_hosts=str(connection["known_hosts"]),
        )

    @classmethod
    def for_node(cls, node: Reachable) -> Target:
        """How to reach a node, as its plan says (user, port, key, the pinned known_hosts)."""
        return cls(
            node=node.name,
            host=node.address,
            port=node.ssh_port,
            user=node.ssh_user,
            key_path=str(Path(node.ssh_key_path).expanduser()),
            known_hosts=str(Path(node.ssh_known_hosts).expanduser()),
        )


@dataclass(frozen=True)
class Result:
    stdout: str
    stderr: str
    exit_status: int

    @property
    def ok(self) -> bool:
        return self.exit_status == 0


def sudo_wrap(command: str) -> str:
    """Run the whole command line as root, pipes and redirections included."""
    return f"sudo -n -- sh -c {shlex.quote(command)}"


def command_failed(target: Target, command: str, result: Result) -> SshError:
    detail = (result.stderr or result.stdout).strip()
    failure = NoSuchUser if UNKNOWN_USER in result.stderr else SshError
    return failure(
        f"{target.where()}: `{command}` exited {result.exit_status}"
        + (f": {detail}" if detail else "")
    )

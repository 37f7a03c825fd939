"""Sysctl: a kernel parameter set now and persisted by a file in /etc/sysctl.d."""

from __future__ import annotations

import re
import shlex
from typing import Any

import pulumi
from pulumi.dynamic import CheckFailure

from sparkrack.asking import gather
from sparkrack.facts.files import file_state
from sparkrack.facts.sysctl import normalize_value, sysctl_value
from sparkrack.resources.base import PULUMI_MODULE, Live, NodeProvider, NodeResource, Props
from sparkrack.resources.files import remove_file, sha256_of, write_file
from sparkrack.transport import ssh
from sparkrack.transport.target import SshError, Target

KEY = re.compile(r"^[a-z0-9_]+(\.[A-Za-z0-9_-]+)+$")


def persisted_path(key: str) -> str:
    return f"/etc/sysctl.d/90-sparkrack-{key}.conf"


def persisted_content(key: str, value: str) -> str:
    return f"# managed by sparkrack\n{key} = {value}\n"


def set_command(key: str, value: str) -> str:
    return shlex.join(["sysctl", "-q", "-w", f"{key}={value}"])


class SysctlProvider(NodeProvider):
    INPUTS = ("key", "value", "persisted")
    STATE = ("value", "persisted")
    REPLACE = ("key",)
    DERIVED = ("persisted",)

    def identity(self, props: Props) -> str:
        return str(props["key"])

    def validate(self, props: Props) -> list[CheckFailure]:
        if not KEY.match(str(props["key"])):
            return [CheckFailure("key", f"{props['key']!r} is not a sysctl key")]
        return []

    def derive(self, props: Props) -> dict[str, Any]:
        return {"value": normalize_value(str(props["value"])), "persisted": True}

    def observe(self, target: Target, props: Props) -> Live | None:
        key, value = str(props["key"]), str(props["value"])
        stored = gather(target, file_state(persisted_path(key)))
        persisted = stored is not None and stored.sha256 == sha256_of(persisted_content(key, value))
        return {"value": gather(target, sysctl_value(key)), "persisted": persisted}

    def apply(self, target: Target, props: Props, live: Live | None) -> dict[str, Any]:
        if live is None:
            raise SshError(f"{target.where()}: no sysctl {props['key']}")
        key, value = str(props["key"]), str(props["value"])
        if not live["persisted"]:
            write_file(target, persisted_path(key), persisted_content(key, value))
        if live["value"] != value:
            ssh.run(target, set_command(key, value), sudo=True)
        return {"restore": {"value": live["value"]}}

    def remove(self, target: Target, props: Props) -> None:
        key = str(props["key"])
        remove_file(target, persisted_path(key))
        restore = props.get("restore")
        if restore is not None:
            ssh.run(target, set_command(key, restore["value"]), sudo=True)

    def undo(self, target: Target, props: Props, before: Live | None) -> None:
        if before is not None and not before["persisted"]:
            self.remove(target, {**props, "restore": {"value": before["value"]}})


class Sysctl(NodeResource, module=PULUMI_MODULE, name="Sysctl"):
    """A kernel parameter on one node. Outputs: value (live) and persisted (the file matches)."""

    value: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        target: Target,
        key: str,
        value: str,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        props = {"key": key, "value": value, "persisted": None}
        super().__init__(SysctlProvider(), name, target, props, opts)

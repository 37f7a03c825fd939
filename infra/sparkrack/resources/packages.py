"""Packages: Debian/Ubuntu packages present; only the missing ones are installed (apt).

Read lists which of the declared packages dpkg has installed, so a removed one shows as drift.
Delete removes only what this resource installed: a package the node had before is not ours.
"""

from __future__ import annotations

import shlex
from typing import Any

import pulumi
from pulumi.dynamic import CheckFailure

from sparkrack.asking import gather
from sparkrack.facts.packages import installed_packages
from sparkrack.resources.base import PULUMI_MODULE, Live, NodeProvider, NodeResource, Props
from sparkrack.transport import ssh
from sparkrack.transport.target import Target

APT_TIMEOUT_S = 900
APT = "DEBIAN_FRONTEND=noninteractive apt-get -q -y -o Dpkg::Options::=--force-confold"


def install_command(missing: list[str]) -> str:
    return f"apt-get -q update && {APT} install --no-install-recommends -- {shlex.join(missing)}"


class PackagesProvider(NodeProvider):
    INPUTS = ("packages",)
    STATE = ("packages",)
    REPLACE = ()

    def identity(self, props: Props) -> str:
        return "packages"

    def validate(self, props: Props) -> list[CheckFailure]:
        bad = [p for p in props["packages"] if not p or p.startswith("-") or " " in p]
        return [CheckFailure("packages", f"not package names: {bad}")] if bad else []

    def derive(self, props: Props) -> dict[str, Any]:
        return {"packages": sorted(set(props["packages"]))}

    def observe(self, target: Target, props: Props) -> Live | None:
        installed = gather(target, installed_packages(props["packages"]))
        return {"packages": sorted(p for p in props["packages"] if p in installed)}

    def apply(self, target: Target, props: Props, live: Live | None) -> dict[str, Any]:
        have = set(live["packages"]) if live else set()
        missing = sorted(set(props["packages"]) - have)
        if missing:
            ssh.run(target, install_command(missing), sudo=True, timeout=APT_TIMEOUT_S)
        return {"restore": {"installed": missing}}

    def remove(self, target: Target, props: Props) -> None:
        ours = (props.get("restore") or {}).get("installed") or []
        if ours:
            ssh.run(target, f"{APT} remove -- {shlex.join(ours)}", sudo=True, timeout=APT_TIMEOUT_S)


class Packages(NodeResource, module=PULUMI_MODULE, name="Packages"):
    """Packages on one node. Output: packages, those of the declared that are installed."""

    packages: pulumi.Output[list[str]]

    def __init__(
        self,
        name: str,
        target: Target,
        packages: list[str],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__(PackagesProvider(), name, target, {"packages": packages}, opts)

"""NftTable: one nftables table of sparkrack's, loaded now and at every boot.

The table is a script that `nft -f` loads whole, in one transaction, and a oneshot unit loads
it again at boot (as Sysctl persists in /etc/sysctl.d). `rules` is read from the kernel
(facts/nft.py), so a table flushed or edited by hand is drift on its node; `persisted` says the
script and its boot unit are in place and enabled.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
from pulumi.dynamic import CheckFailure

from sparkrack.asking import gather
from sparkrack.facts.files import file_state
from sparkrack.facts.nft import nft_table
from sparkrack.resources.base import PULUMI_MODULE, Live, NodeProvider, NodeResource, Props
from sparkrack.resources.files import remove_file, sha256_of, write_file
from sparkrack.transport import ssh
from sparkrack.transport.target import Target

TABLE = re.compile(r"^[a-z][a-z0-9_]{0,31}$")
FAMILIES = ("inet", "ip", "ip6")


def script_path(table: str) -> str:
    return f"/etc/sparkrack/nftables/{table}.nft"


def unit_name(table: str) -> str:
    return f"sparkrack-nft-{table.replace('_', '-')}.service"


def unit_path(table: str) -> str:
    return f"/etc/systemd/system/{unit_name(table)}"


def unit_text(table: str) -> str:
    # Before network-pre, as Debian's own nftables.service: the table is there before any
    # service of this node can listen.
    return (
        "# managed by sparkrack\n"
        "[Unit]\n"
        f"Description=sparkrack's nftables table {table}\n"
        "DefaultDependencies=no\n"
        "Wants=network-pre.target\n"
        "Before=network-pre.target shutdown.target\n"
        "After=nftables.service\n"
        "\n[Service]\n"
        "Type=oneshot\n"
        "RemainAfterExit=yes\n"
        f"ExecStart=/usr/sbin/nft -f {script_path(table)}\n"
        "\n[Install]\n"
        "WantedBy=sysinit.target\n"
    )


def enabled_link(table: str) -> str:
    """The link `systemctl enable` makes; reading through it proves the unit file is enabled."""
    return f"/etc/systemd/system/sysinit.target.wants/{unit_name(table)}"


class NftTableProvider(NodeProvider):
    INPUTS = ("family", "table", "rules", "script", "persisted")
    STATE = ("rules", "persisted")
    REPLACE = ("family", "table")
    DERIVED = ("persisted",)

    def identity(self, props: Props) -> str:
        return f"nftables table {props['family']} {props['table']}"

    def validate(self, props: Props) -> list[CheckFailure]:
        if props["family"] not in FAMILIES:
            return [CheckFailure("family", f"{props['family']!r} is not one of {FAMILIES}")]
        if not TABLE.match(str(props["table"])):
            return [CheckFailure("table", f"{props['table']!r} is not a table name of ours")]
        return []

    def derive(self, props: Props) -> dict[str, Any]:
        return {"persisted": True}

    def observe(self, target: Target, props: Props) -> Live | None:
        family, table = str(props["family"]), str(props["table"])
        rules = gather(target, nft_table(family, table))
        script = gather(target, file_state(script_path(table)))
        unit = gather(target, file_state(enabled_link(table)))
        persisted = (
            script is not None
            and script.sha256 == sha256_of(str(props["script"]))
            and unit is not None
            and unit.sha256 == sha256_of(unit_text(table))
        )
        return {"rules": list(rules or ()), "persisted": persisted, "present": rules is not None}

    def apply(self, target: Target, props: Props, live: Live | None) -> dict[str, Any]:
        table, unit = str(props["table"]), unit_name(str(props["table"]))
        write_file(target, script_path(table), str(props["script"]), mode="0600")
        write_file(target, unit_path(table), unit_text(table))
        # Loaded by its unit, as at boot: a unit that cannot load the table fails here, not later.
        load = [
            "systemctl daemon-reload",
            f"systemctl enable -- {unit}",
            f"systemctl restart -- {unit}",
        ]
        ssh.run(target, " && ".join(load), sudo=True)
        return {}

    def remove(self, target: Target, props: Props) -> None:
        family, table = str(props["family"]), str(props["table"])
        if gather(target, nft_table(family, table)) is not None:
            ssh.run(target, shlex.join(["nft", "delete", "table", family, table]), sudo=True)
        ssh.run(target, f"systemctl disable -- {unit_name(table)} || true", sudo=True)
        remove_file(target, unit_path(table))
        remove_file(target, script_path(table))
        ssh.run(target, "systemctl daemon-reload", sudo=True)

    def undo(self, target: Target, props: Props, before: Live | None) -> None:
        if before is None or not before["present"]:
            self.remove(target, props)


@dataclass(frozen=True)
class NftTableArgs:
    """The table `table` of `family` holding `rules`, loaded and persisted by `script`."""

    target: Target
    family: str
    table: str
    rules: Sequence[str]
    script: str


class NftTable(NodeResource, module=PULUMI_MODULE, name="NftTable"):
    """An nftables table on one node. Outputs: rules (as the kernel holds them) and persisted."""

    rules: pulumi.Output[list[str]]

    def __init__(
        self, name: str, args: NftTableArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        props = {
            "family": args.family,
            "table": args.table,
            "rules": list(args.rules),
            "script": args.script,
            "persisted": None,
        }
        super().__init__(NftTableProvider(), name, args.target, props, opts)

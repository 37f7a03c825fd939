"""FileBlock: a marked block of lines in a file that others own too; the rest is left alone.

/etc/hosts, /etc/default/irqbalance and ~/.ssh/authorized_keys belong to the node and its people;
sparkrack owns only the lines between its markers. Read hashes the block found there, so an edit
inside it shows as drift and an edit outside it does not. The file is rewritten atomically with
its own mode and owner.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi

from sparkrack.asking import gather
from sparkrack.facts.blocks import block_of, blocked_file, with_block
from sparkrack.facts.files import file_state
from sparkrack.resources.base import PULUMI_MODULE, Live, NodeProvider, NodeResource, Props
from sparkrack.resources.files import remove_file, sha256_of, write_file
from sparkrack.resources.units import restart_if_running
from sparkrack.transport.target import Target


class FileBlockProvider(NodeProvider):
    INPUTS = ("path", "name", "block", "mode", "owner", "group", "sha256", "restarts")
    STATE = ("sha256",)
    REPLACE = ("path", "name")
    DERIVED = ("sha256",)
    OPTIONAL = ("restarts",)

    def identity(self, props: Props) -> str:
        return f"{props['path']} block {props['name']}"

    def derive(self, props: Props) -> dict[str, Any]:
        return {"sha256": sha256_of(str(props["block"]))}

    def observe(self, target: Target, props: Props) -> Live | None:
        text = gather(target, blocked_file(str(props["path"]))).text
        if text is None:
            return None
        block = block_of(text, str(props["name"]))
        return {"sha256": "" if block is None else sha256_of(block)}

    def apply(self, target: Target, props: Props, live: Live | None) -> dict[str, Any]:
        path, name = str(props["path"]), str(props["name"])
        text = gather(target, blocked_file(path)).text
        self.write(target, props, text, with_block(text or "", name, str(props["block"])))
        if props.get("restarts"):
            restart_if_running(target, str(props["restarts"]))
        return {"restore": {"created_file": text is None}}

    def write(self, target: Target, props: Props, before: str | None, text: str) -> None:
        """Keep the file's own mode and owner; a new file takes the declared ones."""
        stat = gather(target, file_state(str(props["path"]))) if before is not None else None
        mode, owner, group = (
            (stat.mode, stat.owner, stat.group)
            if stat
            else (props["mode"], props["owner"], props["group"])
        )
        write_file(target, str(props["path"]), text, mode, owner, group)

    def remove(self, target: Target, props: Props) -> None:
        path = str(props["path"])
        text = gather(target, blocked_file(path)).text
        if text is None:
            return
        left = with_block(text, str(props["name"]), None)
        if (props.get("restore") or {}).get("created_file") and not left.strip():
            remove_file(target, path)
        elif left != text:
            self.write(target, props, text, left)
        if props.get("restarts"):
            restart_if_running(target, str(props["restarts"]))  # it runs the file as left

    def undo(self, target: Target, props: Props, before: Live | None) -> None:
        if before is None or before["sha256"] == "":
            self.remove(target, {**props, "restore": {"created_file": before is None}})


@dataclass(frozen=True)
class FileBlockArgs:
    """The block `name` in the file at `path` (mode and owner its own when it makes the file);
    `restarts`: the system unit a write restarts if it runs."""

    target: Target
    path: str
    name: str
    block: pulumi.Input[str]
    mode: str = "0644"
    owner: str = "root"
    group: str = "root"
    restarts: str = ""


class FileBlock(NodeResource, module=PULUMI_MODULE, name="FileBlock"):
    """Lines between `# BEGIN sparkrack <name>` and `# END ...` in a file. Output: sha256. A
    write restarts the system unit `restarts` if it runs (one that reads the file at its start)."""

    sha256: pulumi.Output[str]

    def __init__(
        self, name: str, args: FileBlockArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        props: dict[str, Any] = {"path": args.path, "name": args.name, "block": args.block}
        props |= {"mode": args.mode, "owner": args.owner, "group": args.group, "sha256": None}
        if args.restarts:  # only where asked: every other block's inputs stay as they were
            props["restarts"] = args.restarts
        super().__init__(FileBlockProvider(), name, args.target, props, opts)

"""RemoteFile: a file's content, mode and owner, written atomically; read back as sha256 + stat.

The write goes to a temporary file in the same directory, is checked against the content's
sha256 (a cut connection ends stdin early, and a short file must never be renamed into place),
then renamed over the target. A trap removes the temporary file on any failure, and the next write
to the same path removes one that a killed write could not. The directories a create had to make
are recorded, and its delete removes them when they are empty again.
"""

from __future__ import annotations

import hashlib
import posixpath
import shlex
from dataclasses import dataclass
from typing import Any

import pulumi
from pulumi.dynamic import CheckFailure

from sparkrack.asking import gather
from sparkrack.facts.files import deepest_first, file_state, missing_directories, normalize_mode
from sparkrack.resources.base import PULUMI_MODULE, Live, NodeProvider, NodeResource, Props
from sparkrack.resources.units import restart_if_running
from sparkrack.transport import ssh
from sparkrack.transport.target import Target

TEMP_MARK = ".sparkrack-tmp."  # in every temporary name, so a leftover is easy to find


def sha256_of(content: str) -> str:
    return hashlib.sha256(content.encode()).hexdigest()


def atomic_write_script(path: str, sha256: str, mode: str, owner: str, group: str) -> str:
    """A POSIX sh script that installs stdin at `path`, all or nothing."""
    directory, name = posixpath.split(path)
    prefix = f"{directory}/.{name}{TEMP_MARK}"
    return "; ".join(
        [
            "set -eu",
            make_directory(directory, owner),
            # One writer per path: a temporary file left by an earlier write that was killed
            # outright (no trap runs on SIGKILL) is this path's own, and goes now.
            f"rm -f -- {shlex.quote(prefix)}*",
            f"tmp=$(mktemp {shlex.quote(prefix + 'XXXXXX')})",
            "trap 'rm -f -- \"$tmp\"' EXIT",
            "trap 'exit 1' HUP INT TERM",
            'cat > "$tmp"',
            f'echo {shlex.quote(sha256)}"  $tmp" | sha256sum --check --status -',
            f'chown {shlex.quote(f"{owner}:{group}")} -- "$tmp"',
            f'chmod {shlex.quote(normalize_mode(mode))} -- "$tmp"',
            f'mv -f -- "$tmp" {shlex.quote(path)}',
        ]
    )


def make_directory(directory: str, owner: str) -> str:
    """mkdir -p, as the file's owner: a user's ~/.config made by root would lock the user out."""
    quoted = shlex.quote(directory)
    if owner == "root":
        return f"mkdir -p -- {quoted}"
    return f"[ -d {quoted} ] || runuser -u {shlex.quote(owner)} -- mkdir -p -- {quoted}"


def write_file(
    target: Target,
    path: str,
    content: str,
    mode: str = "0644",
    owner: str = "root",
    group: str = "root",
) -> None:
    script = atomic_write_script(path, sha256_of(content), mode, owner, group)
    ssh.run(target, script, sudo=True, stdin=content)


def remove_file(target: Target, path: str) -> None:
    ssh.run(target, f"rm -f -- {shlex.quote(path)}", sudo=True)


def remove_directories(target: Target, directories: list[str]) -> None:
    """rmdir of the directories a create made, deepest first; one still holding files stays."""
    if directories:
        command = f"rmdir --ignore-fail-on-non-empty -- {shlex.join(deepest_first(directories))}"
        ssh.run(target, command + " 2>/dev/null || true", sudo=True)


def file_live(target: Target, path: str) -> Live | None:
    state = gather(target, file_state(path))
    if state is None:
        return None
    return {"sha256": state.sha256, "mode": state.mode, "owner": state.owner, "group": state.group}


class RemoteFileProvider(NodeProvider):
    INPUTS = ("path", "content", "mode", "owner", "group", "sha256", "restarts", "restarts_as")
    STATE = ("sha256", "mode", "owner", "group")
    SECRET = ("content", "sha256")  # when the file is secret: then neither leaves the state
    REPLACE = ("path",)
    DERIVED = ("sha256",)
    OPTIONAL = ("restarts", "restarts_as")

    def identity(self, props: Props) -> str:
        return str(props["path"])

    def validate(self, props: Props) -> list[CheckFailure]:
        failures = []
        if not posixpath.isabs(str(props["path"])):
            failures.append(CheckFailure("path", f"{props['path']!r} is not an absolute path"))
        try:
            normalize_mode(str(props["mode"]))
        except ValueError:
            failures.append(CheckFailure("mode", f"{props['mode']!r} is not an octal mode"))
        return failures

    def derive(self, props: Props) -> dict[str, Any]:
        return {"sha256": sha256_of(str(props["content"])), "mode": normalize_mode(props["mode"])}

    def observe(self, target: Target, props: Props) -> Live | None:
        return file_live(target, str(props["path"]))

    def apply(self, target: Target, props: Props, live: Live | None) -> dict[str, Any]:
        if live is not None and all(live[key] == props[key] for key in self.STATE):
            return {}  # already right: no write, so an unchanged file keeps its mtime
        path = str(props["path"])
        made = gather(target, missing_directories(posixpath.dirname(path))) if live is None else []
        write_file(target, path, props["content"], props["mode"], props["owner"], props["group"])
        if props.get("restarts"):
            restart_if_running(target, str(props["restarts"]), props.get("restarts_as") or None)
        return {"restore": {"made_dirs": made}}

    def remove(self, target: Target, props: Props) -> None:
        remove_file(target, str(props["path"]))
        remove_directories(target, (props.get("restore") or {}).get("made_dirs") or [])


@dataclass(frozen=True)
class RemoteFileArgs:
    """A file at `path` with `content`, `mode` and owner. `secret`: the content and its hash are
    Pulumi secrets. `restarts`: the unit a write restarts if it runs, a system unit or
    `restarts_as`'s user unit."""

    target: Target
    path: str
    content: pulumi.Input[str]
    mode: str = "0644"
    owner: str = "root"
    group: str = "root"
    secret: bool = False
    restarts: str = ""
    restarts_as: str = ""


class RemoteFile(NodeResource, module=PULUMI_MODULE, name="RemoteFile"):
    """A file on one node. Outputs: sha256, mode, owner, group as the node reports them. A write
    restarts the unit `restarts` if it runs (one that reads the file only at its start): a
    system unit, or `restarts_as`'s user unit."""

    sha256: pulumi.Output[str]
    mode: pulumi.Output[str]

    def __init__(
        self, name: str, args: RemoteFileArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        props: dict[str, Any] = {"path": args.path, "content": args.content, "mode": args.mode}
        props |= {"owner": args.owner, "group": args.group, "sha256": None}  # sha256: in check
        if args.restarts:  # only where asked: every other file's inputs stay as they were
            props["restarts"] = args.restarts
        if args.restarts_as:
            props["restarts_as"] = args.restarts_as
        secrets = ("content", "sha256") if args.secret else ()  # a short secret's hash leaks it
        provider, target = RemoteFileProvider(), args.target
        super().__init__(provider, name, target, props, opts, secret_outputs=secrets)

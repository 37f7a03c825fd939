"""User: the rootless service user with its subordinate ids, linger and memlock limit.

Memlock is set on the user's systemd manager (a `user@UID.service` drop-in), because rootless
containers inherit their limits from it: without it NCCL silently falls back to sockets.

Removal never deletes the account or its home, even one `up` created: the home holds the model
directory, the staged shards and the Podman storage (issue 31), and an account deleted while its
files stay would leave them to a numeric uid that a later `useradd` may not get back. What it
leaves is said, with the command that deletes it.
"""

from __future__ import annotations

import posixpath
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
from pulumi.dynamic import CheckFailure

from sparkrack.asking import gather
from sparkrack.facts.files import missing_directories
from sparkrack.facts.users import account, linger, subids, user_manager_memlock
from sparkrack.resources.base import (
    PULUMI_MODULE,
    Live,
    NodeProvider,
    NodeResource,
    Props,
    warn,
)
from sparkrack.resources.files import remove_directories, remove_file, write_file
from sparkrack.text.limits import UNLIMITED_MEMLOCK, MemlockLimit
from sparkrack.transport import ssh
from sparkrack.transport.target import SshError, Target


def valid_systemd_memlock(text: str) -> bool:
    """As MemlockLimit.systemd() spells a limit, and no other way."""
    try:
        return MemlockLimit.parse(text).systemd() == text
    except ValueError:
        return False


def memlock_dropin(uid: int) -> str:
    return f"/etc/systemd/system/user@{uid}.service.d/50-sparkrack-memlock.conf"


def id_range(span: str) -> str:
    """'100000:65536' (start:count, as /etc/subuid has it) as usermod's 'first-last'."""
    start, count = (int(part) for part in span.split(":"))
    return f"{start}-{start + count - 1}"


def subid_commands(user: str, kind: str, want: list[str], have: list[str]) -> list[str]:
    flag = "subuids" if kind == "subuid" else "subgids"
    drop = [f"--del-{flag}={id_range(s)}" for s in have if s not in want]
    add = [f"--add-{flag}={id_range(s)}" for s in want if s not in have]
    return [shlex.join(["usermod", *drop, *add, "--", user])] if drop or add else []


def memlock_state(planned: str, live: str) -> str:
    """The manager's limit as drift sees it: the planned one while the live one grants it (more
    never hurts NCCL; the checks and the doctor judge it so), else what the node has."""
    return planned if MemlockLimit.parse(planned).granted_by(live) else live


def linger_command(user: str, on: bool) -> str:
    return shlex.join(["loginctl", "enable-linger" if on else "disable-linger", "--", user])


def overlaps(span: str, other: str) -> bool:
    (start, count), (other_start, other_count) = (
        (int(part) for part in range_.split(":")) for range_ in (span, other)
    )
    return start < other_start + other_count and other_start < start + count


def shared_ranges(user: str, want: list[str], held: Mapping[str, Sequence[str]]) -> list[str]:
    """'<range> (also <account>'s)' for each wanted range another account's overlaps."""
    return [
        f"{span} (also {holder}'s {theirs})"
        for span in want
        for holder, spans in sorted(held.items())
        if holder != user
        for theirs in spans
        if overlaps(span, theirs)
    ]


def refuse_shared_ranges(target: Target, props: Props) -> None:
    """Before anything is changed: subordinate ids another account holds would map the service
    user's containers onto that account's files (Ubuntu gives the first login 100000:65536)."""
    user = str(props["name"])
    for kind in ("subuid", "subgid"):
        held = gather(target, subids(kind))
        shared = shared_ranges(user, list(props[f"{kind}s"]), held)
        if shared:
            field = f"roles.base.service_user.{kind}s"
            raise SshError(f"{target.where()}: {field}: {', '.join(shared)}; choose a free range")


class UserProvider(NodeProvider):
    INPUTS = ("name", "subuids", "subgids", "linger", "memlock")
    STATE = ("subuids", "subgids", "linger", "memlock")
    REPLACE = ("name",)

    def identity(self, props: Props) -> str:
        return f"user {props['name']}"

    def validate(self, props: Props) -> list[CheckFailure]:
        failures = []
        for key in ("subuids", "subgids"):
            try:
                [id_range(span) for span in props[key]]
            except ValueError:
                failures.append(CheckFailure(key, f"{props[key]!r}: want 'start:count' ranges"))
        if not valid_systemd_memlock(str(props["memlock"])):
            failures.append(
                CheckFailure("memlock", f"{props['memlock']!r}: want infinity or bytes")
            )
        return failures

    def observe(self, target: Target, props: Props) -> Live | None:
        user = str(props["name"])
        found = gather(target, account(user))
        if found is None:
            return None
        return {
            "uid": found.uid,
            "subuids": list(gather(target, subids("subuid")).get(user, ())),
            "subgids": list(gather(target, subids("subgid")).get(user, ())),
            "linger": gather(target, linger(user)),
            "memlock": memlock_state(
                props["memlock"], gather(target, user_manager_memlock(found.uid))
            ),
        }

    def apply(self, target: Target, props: Props, live: Live | None) -> dict[str, Any]:
        user = str(props["name"])
        refuse_shared_ranges(target, props)
        created = live is None
        if live is None:
            ssh.run(target, shlex.join(["useradd", "--create-home", "--", user]), sudo=True)
            live = self.observe(target, props)
            if live is None:
                raise SshError(f"{target.where()}: useradd {user} left no account")
        self.apply_subids(target, props, live)
        made_dirs = self.apply_memlock(target, props, live)
        if live["linger"] != props["linger"]:
            ssh.run(target, linger_command(user, bool(props["linger"])), sudo=True)
        if props["linger"]:
            # enable-linger only queues the user's manager, and the roles after this one talk to
            # it (`systemctl --user -M`): `start` waits until it runs, and returns at once then.
            manager = f"user@{live['uid']}.service"
            ssh.run(target, shlex.join(["systemctl", "start", "--", manager]), sudo=True)
        restore = {key: live[key] for key in ("subuids", "subgids", "linger", "memlock")}
        return {"restore": {**restore, "created": created, "made_dirs": made_dirs}}

    def apply_subids(self, target: Target, props: Props, live: Live) -> None:
        commands = [
            *subid_commands(props["name"], "subuid", props["subuids"], live["subuids"]),
            *subid_commands(props["name"], "subgid", props["subgids"], live["subgids"]),
        ]
        if commands:
            ssh.run(target, " && ".join(commands), sudo=True)

    def apply_memlock(self, target: Target, props: Props, live: Live) -> list[str]:
        """The manager's drop-in written and the manager restarted on it, where its limit is not
        the planned one; returns the directories the drop-in's write made, for delete."""
        if live["memlock"] == props["memlock"]:
            return []
        unit, dropin = f"user@{live['uid']}.service", memlock_dropin(live["uid"])
        made = gather(target, missing_directories(posixpath.dirname(dropin)))
        write_file(target, dropin, f"[Service]\nLimitMEMLOCK={props['memlock']}\n")
        # A running manager keeps its old limit until restarted; the user's containers with it.
        reload = ["systemctl daemon-reload", shlex.join(["systemctl", "try-restart", unit])]
        ssh.run(target, " && ".join(reload), sudo=True)
        return made

    def remove(self, target: Target, props: Props) -> None:
        live = self.observe(target, props)
        restore = props.get("restore")
        if live is None or restore is None:
            return
        user = str(props["name"])
        if restore["created"]:
            self.retire(target, user, live)
        else:
            self.apply_subids(target, {**props, **restore}, live)
            if live["linger"] != restore["linger"]:
                ssh.run(target, linger_command(user, bool(restore["linger"])), sudo=True)
        remove_file(target, memlock_dropin(live["uid"]))
        remove_directories(target, restore.get("made_dirs") or [])
        ssh.run(target, "systemctl daemon-reload", sudo=True)

    def retire(self, target: Target, user: str, live: Live) -> None:
        """An account `up` made: its manager stopped (no container of it runs on), the account
        and its home kept, and said so."""
        if live["linger"]:
            ssh.run(target, linger_command(user, False), sudo=True)
        manager = f"user@{live['uid']}.service"
        ssh.run(target, shlex.join(["systemctl", "stop", "--", manager]), sudo=True)
        found = gather(target, account(user))
        home = found.home if found else "its home"
        warn(
            f"{target.where()}: kept user {user} and {home} (model files, staged shards, "
            f"container images); `sudo userdel --remove {user}` deletes them"
        )


@dataclass(frozen=True)
class UserArgs:
    """The service user `name` with its subordinate ids, lingering as asked, and what it may
    lock."""

    target: Target
    name: str
    subuids: Sequence[str]
    subgids: Sequence[str]
    linger: bool = True
    memlock_limit: MemlockLimit = UNLIMITED_MEMLOCK


class User(NodeResource, module=PULUMI_MODULE, name="User"):
    """The service user on one node. Outputs: uid, subuids, subgids, linger, memlock (live)."""

    uid: pulumi.Output[int]

    def __init__(
        self, name: str, args: UserArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        props = {
            "name": args.name,
            "subuids": list(args.subuids),
            "subgids": list(args.subgids),
            "linger": args.linger,
            "memlock": args.memlock_limit.systemd(),
            "uid": None,
        }
        super().__init__(UserProvider(), name, args.target, props, opts)

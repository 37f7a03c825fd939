"""User: the rootless service user with its subordinate ids, linger and memlock limit.

Memlock is set on the user's systemd manager (a `user@UID.service` drop-in), because rootless
containers inherit their limits from it: without it NCCL silently falls back to sockets.
"""

from __future__ import annotations

import shlex
from typing import Any

import pulumi
from pulumi.dynamic import CheckFailure

from sparkrack import ssh
from sparkrack.facts import gather
from sparkrack.facts.users import account, linger, subids, user_manager_memlock
from sparkrack.resources.base import PULUMI_MODULE, Live, NodeProvider, NodeResource, Props
from sparkrack.resources.files import remove_file, write_file
from sparkrack.ssh import SshError, Target

UNLIMITED = "infinity"


def memlock_setting(limit: int | None) -> str:
    """NodePlan.memlock_limit (None: unlimited) as systemd writes LimitMEMLOCK."""
    return UNLIMITED if limit is None else str(limit)


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


def linger_command(user: str, on: bool) -> str:
    return shlex.join(["loginctl", "enable-linger" if on else "disable-linger", "--", user])


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
        memlock = str(props["memlock"])
        if memlock != UNLIMITED and not memlock.isdigit():
            failures.append(CheckFailure("memlock", f"{memlock!r}: want {UNLIMITED} or bytes"))
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
            "memlock": gather(target, user_manager_memlock(found.uid)),
        }

    def apply(self, target: Target, props: Props, live: Live | None) -> dict[str, Any]:
        user = str(props["name"])
        created = live is None
        if live is None:
            ssh.run(target, shlex.join(["useradd", "--create-home", "--", user]), sudo=True)
            live = self.observe(target, props)
            if live is None:
                raise SshError(f"{target.where()}: useradd {user} left no account")
        self.apply_subids(target, props, live)
        self.apply_memlock(target, props, live)
        if live["linger"] != props["linger"]:
            ssh.run(target, linger_command(user, bool(props["linger"])), sudo=True)
        if props["linger"]:
            # enable-linger only queues the user's manager, and the roles after this one talk to
            # it (`systemctl --user -M`): `start` waits until it runs, and returns at once then.
            manager = f"user@{live['uid']}.service"
            ssh.run(target, shlex.join(["systemctl", "start", "--", manager]), sudo=True)
        restore = {key: live[key] for key in ("subuids", "subgids", "linger", "memlock")}
        return {"restore": {**restore, "created": created}}

    def apply_subids(self, target: Target, props: Props, live: Live) -> None:
        commands = [
            *subid_commands(props["name"], "subuid", props["subuids"], live["subuids"]),
            *subid_commands(props["name"], "subgid", props["subgids"], live["subgids"]),
        ]
        if commands:
            ssh.run(target, " && ".join(commands), sudo=True)

    def apply_memlock(self, target: Target, props: Props, live: Live) -> None:
        if live["memlock"] == props["memlock"]:
            return
        unit = f"user@{live['uid']}.service"
        write_file(
            target, memlock_dropin(live["uid"]), f"[Service]\nLimitMEMLOCK={props['memlock']}\n"
        )
        # A running manager keeps its old limit until restarted; the user's containers with it.
        reload = ["systemctl daemon-reload", shlex.join(["systemctl", "try-restart", unit])]
        ssh.run(target, " && ".join(reload), sudo=True)

    def remove(self, target: Target, props: Props) -> None:
        live = self.observe(target, props)
        restore = props.get("restore")
        if live is None or restore is None:
            return
        user = str(props["name"])
        if restore["created"]:
            ssh.run(target, shlex.join(["userdel", "--remove", "--", user]), sudo=True)
        else:
            self.apply_subids(target, {**props, **restore}, live)
            if live["linger"] != restore["linger"]:
                ssh.run(target, linger_command(user, bool(restore["linger"])), sudo=True)
        remove_file(target, memlock_dropin(live["uid"]))
        ssh.run(target, "systemctl daemon-reload", sudo=True)


class User(NodeResource, module=PULUMI_MODULE, name="User"):
    """The service user on one node. Outputs: uid, subuids, subgids, linger, memlock (live)."""

    uid: pulumi.Output[int]

    def __init__(
        self,
        name: str,
        target: Target,
        user: str,
        subuids: list[str],
        subgids: list[str],
        linger: bool = True,
        memlock_limit: int | None = None,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        props = {
            "name": user,
            "subuids": subuids,
            "subgids": subgids,
            "linger": linger,
            "memlock": memlock_setting(memlock_limit),
            "uid": None,
        }
        super().__init__(UserProvider(), name, target, props, opts)

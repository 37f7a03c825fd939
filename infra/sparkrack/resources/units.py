"""Unit: a systemd unit enabled and active (or not), in the system or a user's manager.

The unit file itself is a RemoteFile; this resource owns only the unit's state. It reloads the
manager first, so a unit file written in the same run is known.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import pulumi
from pulumi.dynamic import CheckFailure

from sparkrack.asking import gather
from sparkrack.facts.journal import ERROR_TAIL, journal_tail, system_journal_tail
from sparkrack.facts.units import Scope, config_age, systemctl, unit_state
from sparkrack.resources.base import PULUMI_MODULE, Live, NodeProvider, NodeResource, Props
from sparkrack.transport import ssh
from sparkrack.transport.target import NODE_UNAVAILABLE, SshError, Target


def state_commands(props: Props, live: Live) -> list[str]:
    """daemon-reload, then only the enable/start (or disable/stop) steps that differ; a running
    unit whose start-time config changed since it started is restarted."""

    def ctl(*args: str) -> str:
        return systemctl(props["scope"], props.get("user"), *args)

    unit = str(props["unit"])
    commands = [ctl("daemon-reload")]
    if props["enabled"] != live["enabled"]:
        commands.append(ctl("enable" if props["enabled"] else "disable", "--", unit))
    if props["active"] != live["active"]:
        commands.append(ctl("start" if props["active"] else "stop", "--", unit))
    elif props["active"] and not live.get("current", True):
        commands.append(ctl("restart", "--", unit))
    return commands


# What systemctl says when the user's session bus was not there a moment: seen on one node of
# CI's sim-16 in three runs, in `show` and in `enable` right after `daemon-reload`, always while
# the user's D-Bus was being socket-activated for the first time, and once on sim-2 in a destroy's
# `disable`. Every checked `systemctl --user` of the resources goes through on_the_bus (Unit's,
# and Container's in resources/podman.py; Container's unchecked stop and disable in a delete do
# not). Any other failure is reported as it is.
BUS_LOST = ("Transport endpoint is not connected", "Failed to connect to")
BUS_TRIES, BUS_PAUSE_S = 3, 2.0
T = TypeVar("T")


def on_the_bus(ask: Callable[[], T]) -> T:
    """`ask` (a systemctl read or idempotent state change), asked again when the bus was lost."""
    for _ in range(BUS_TRIES - 1):
        try:
            return ask()
        except SshError as error:
            if not any(sign in str(error) for sign in BUS_LOST):
                raise
            time.sleep(BUS_PAUSE_S)
    return ask()  # the last try: whatever it raises is the answer


def restart_if_running(target: Target, unit: str, user: str | None = None) -> None:
    """After a write to a file `unit` reads only when it starts (a handler, as Ansible's notify):
    reload systemd (the file may be the unit's own), restart the unit if it runs, else nothing;
    in `user`'s manager when given. Its Unit's `current` catches what this misses (a run stopped
    between write and restart)."""
    scope: Scope = "user" if user else "system"
    reload, restart = (
        systemctl(scope, user, *args) for args in (("daemon-reload",), ("try-restart", "--", unit))
    )
    # 5: no such unit yet (a first `up` writes the files before the unit that reads them).
    command = f"{reload} && {{ {restart} || [ $? -eq 5 ]; }}"
    on_the_bus(lambda: ssh.run(target, command, sudo=True))


class UnitProvider(NodeProvider):
    INPUTS = ("unit", "scope", "user", "enabled", "active", "reloads", "current")
    STATE = ("enabled", "active", "current")
    REPLACE = ("unit", "scope", "user")

    def identity(self, props: Props) -> str:
        scope = "system" if props["scope"] == "system" else f"user {props['user']}"
        return f"{props['unit']} ({scope})"

    def validate(self, props: Props) -> list[CheckFailure]:
        if props["scope"] not in ("system", "user"):
            return [CheckFailure("scope", f"{props['scope']!r} is neither system nor user")]
        if props["scope"] == "user" and not props.get("user"):
            return [CheckFailure("user", "a user-scope unit needs its user")]
        if props.get("reloads") and props["scope"] != "system":
            return [CheckFailure("reloads", "only a system unit's config age is read")]
        return []

    def observe(self, target: Target, props: Props) -> Live | None:
        scope: Scope = props["scope"]
        fact = unit_state(str(props["unit"]), scope, props.get("user") or None)
        state = on_the_bus(lambda: gather(target, fact))
        return {
            "enabled": state.enabled,
            "active": state.active,
            "current": not (state.active and self.stale(target, props)),
            "load_state": state.load,
        }

    def stale(self, target: Target, props: Props) -> bool:
        """Whether a file the unit reads only at its start changed after it started (the
        irqbalance ban, the IRQ pin's mask): the unit runs what the files no longer say."""
        reloads = tuple(props.get("reloads") or ())
        return bool(reloads) and gather(target, config_age(str(props["unit"]), reloads)).stale

    def apply(self, target: Target, props: Props, live: Live | None) -> dict[str, Any]:
        if live is None or live["load_state"] == "not-found":
            raise SshError(f"{target.where()}: no unit {self.identity(props)}")
        command = " && ".join(state_commands(props, live))
        try:
            on_the_bus(lambda: ssh.run(target, command, sudo=True))
        except NODE_UNAVAILABLE:
            raise  # no log to read there either
        except SshError as error:
            raise SshError(f"{error}\n{self.log_tail(target, props)}") from None
        return {}  # the read-back after apply catches a unit that did not stay active

    def log_tail(self, target: Target, props: Props) -> str:
        """The unit's last log lines, for the error of a failed start: systemctl says only
        "see journalctl", on a node the person reading the error may not be logged in to."""
        unit = str(props["unit"])
        if props["scope"] == "system":
            fact = system_journal_tail(unit, ERROR_TAIL)
        else:
            fact = journal_tail(unit, "0", ERROR_TAIL)
        return f"{unit}'s log ends:\n{gather(target, fact) or '(empty)'}"

    def remove(self, target: Target, props: Props) -> None:
        live = self.observe(target, props)
        if live is None or live["load_state"] == "not-found":
            return  # its unit file is already gone
        stopped = {**props, "enabled": False, "active": False}
        command = " && ".join(state_commands(stopped, live))
        on_the_bus(lambda: ssh.run(target, command, sudo=True))  # a destroy loses the bus too


@dataclass(frozen=True)
class UnitArgs:
    """The systemd `unit`, enabled and active as asked, in `scope` (a user unit: `user`'s);
    `reloads`: the files it reads only when it starts."""

    target: Target
    unit: str
    enabled: bool = True
    active: bool = True
    scope: Scope = "system"
    user: str = ""
    reloads: tuple[str, ...] = ()


class Unit(NodeResource, module=PULUMI_MODULE, name="Unit"):
    """A systemd unit on one node. Outputs: enabled, active, load_state as systemd reports them,
    and `current`: False while a file of `reloads` (read only when the unit starts) is newer than
    its start; an update then restarts it."""

    enabled: pulumi.Output[bool]
    active: pulumi.Output[bool]

    def __init__(
        self, name: str, args: UnitArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        props = {
            "unit": args.unit,
            "scope": args.scope,
            "user": args.user,
            "enabled": args.enabled,
            "active": args.active,
            "reloads": list(args.reloads),
            "current": True,
        }
        super().__init__(UnitProvider(), name, args.target, props, opts)

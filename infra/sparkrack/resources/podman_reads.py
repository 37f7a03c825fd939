"""What the Podman resources read in the service user's Podman: a fact as that user, and of a
container the inspect record (shared in a refresh), the env, devices and limits it was created
with, its CPUs from /proc, and why a unit that does not run stopped; how its unit restarts."""

from __future__ import annotations

from typing import Any, TypeVar

from sparkrack.asking import gather, shared
from sparkrack.facts import Fact, journal, proc
from sparkrack.facts import podman as podman_facts
from sparkrack.facts.units import systemctl
from sparkrack.transport.target import Target

T = TypeVar("T")


def read_as(target: Target, user: str, fact: Fact[T]) -> T:
    """A fact read in the user's rootless Podman."""
    return gather(target, fact.as_user(user))


def start_command(user: str, unit: str) -> str:
    """The unit's definition reloaded, then the unit restarted, running or not. Not `start` when
    no container runs: the unit may be starting its old definition right then (Restart= after
    its Ray went away; a plain unit is active once `podman run` is forked), and a start would
    count that as done and leave the old container, with the old image, running (seen in CI)."""
    commands = [systemctl("user", user, "daemon-reload"), systemctl("user", user, "restart", unit)]
    return " && ".join(commands)


def inspect_container(target: Target, user: str, name: str) -> dict[str, Any] | None:
    """The container's inspect record, or None. In a refresh, from one inspect of all the user's
    containers, which serves every Container of the node; elsewhere (an apply's reads, a wait
    polling each second) nothing is shared, and inspecting the one container costs one Podman
    start where listing and inspecting all of them costs two."""
    if shared.sharing():
        return read_as(target, user, podman_facts.containers()).get(name)
    return read_as(target, user, podman_facts.container(name))


def cpus_allowed(target: Target, pid: int) -> str:
    """The cores the container's process may run on; '' when it is gone by now."""
    return gather(target, proc.cpus_allowed(pid))


# Read even when nobody declared them: set by hand, they show as drift (seed 001: it cost 58%).
WATCHED_ENV = ("NCCL_IB_DISABLE",)


def declared_env(inspected: dict[str, Any], keys: list[str]) -> dict[str, str]:
    env = dict(item.split("=", 1) for item in inspected["Config"]["Env"] if "=" in item)
    return {key: env[key] for key in (*keys, *WATCHED_ENV) if key in env}


def created_devices(inspected: dict[str, Any], wanted: list[str]) -> list[str]:
    """The devices (paths or CDI names) the running container was given, in the declared order
    where they are the declared ones: a dropped GPU shows as a missing name."""
    given = podman_facts.created_with(inspected, "--device")
    return [d for d in wanted if d in given] + [d for d in given if d not in wanted]


def created_ulimits(inspected: dict[str, Any], wanted: dict[str, str]) -> dict[str, str]:
    """The limits it was created with, of those declared (memlock: NCCL's registration)."""
    given = dict(
        item.partition("=")[::2] for item in podman_facts.created_with(inspected, "--ulimit")
    )
    return {name: given[name] for name in wanted if name in given}


def unit_outcome(target: Target, user: str, unit: str) -> str:
    """Why a container unit is not running, for the error: its state and its log's tail."""
    state = gather(target, journal.unit_outcome(unit, user))
    log = gather(
        target, journal.journal_tail(unit, state.pop("ExecMainPID", "0"), journal.ERROR_TAIL)
    )
    summary = " ".join(f"{key}={value}" for key, value in state.items()) or "no state"
    return f"{unit}: {summary}; its log ends:\n{log or '(empty)'}"

"""Image and Container: rootless Podman for the service user, read back with `podman inspect`.

Image is present on a node with one id: on the head it is built from a Containerfile (or must be
present already); every other node gets it shipped from the head, `podman load` over SSH with the
head's own key (base role) from an archive the head saves once per image id (image_ship.py). Read
reports the id each node has, so a node whose image differs shows as drift on that node's Image.

A new reference is another image, brought in beside the old one: the containers, whose image_id
follows the new Image, move to it, and the engine deletes the old Image only once the program is
done. That delete is `podman rmi` without --force, which only untags a name the image shares and
refuses an image a container still runs from: then only the name goes, the image stays.
An image made with `keep` (the engine's) is not removed at all: the previous engine stays under its
name, a rollback, until `sparkrack images prune`; only its shipping archives go.

Container is a Quadlet `.container` unit in the user's ~/.config/containers/systemd (Podman >= 4.4;
older Podman gets a plain user unit that runs `podman run`; both written by container_unit.py).
Read inspects the running container: state, image id, the declared env keys, devices and limits,
and the CPUs it may run on, read from /proc so that a cgroup v1 host (where rootless Podman drops
--cpuset-cpus) still tells the truth.
"""

from __future__ import annotations

import posixpath
import re
import shlex
import time
from typing import Any, ClassVar, TypeVar

import pulumi
from pulumi.dynamic import CheckFailure, DiffResult, UpdateResult

from sparkrack.facts import Fact, gather, journal, proc, shared
from sparkrack.facts import podman as podman_facts
from sparkrack.facts.files import file_state, missing_directories
from sparkrack.facts.host import HostKind, host_kind
from sparkrack.facts.keys import by_node_name
from sparkrack.facts.units import systemctl
from sparkrack.resources.base import (
    PULUMI_MODULE,
    Live,
    NodeProvider,
    NodeResource,
    Props,
    say,
    target_of,
    warn,
)
from sparkrack.resources.container_unit import quadlet_unit, unit_file
from sparkrack.resources.files import (
    remove_directories,
    remove_file,
    sha256_of,
    write_file,
)
from sparkrack.resources.image_ship import archive_stem, ship_script
from sparkrack.resources.links import leased_address
from sparkrack.resources.units import on_the_bus
from sparkrack.transport import ssh
from sparkrack.transport.target import SshError, Target, as_user, command_failed

T = TypeVar("T")

SHIP_TIMEOUT_S = 1800
START_TIMEOUT_S = 90.0


def podman(user: str, *args: str) -> str:
    return as_user(user, shlex.join(["podman", *args]))


def read_as(target: Target, user: str, fact: Fact[T]) -> T:
    """A fact read in the user's rootless Podman."""
    return gather(target, fact.as_user(user))


def image_id(target: Target, user: str, reference: str) -> str:
    """The image id the user's Podman has under `reference`, or '' without one."""
    return read_as(target, user, podman_facts.image_id(reference))


IN_USE = 2  # `podman rmi`'s exit status when a container still runs from the image
USED_BY = re.compile(r"image used by ([0-9a-f]{12,64})")  # how Podman names that container


def image_users(target: Target, user: str, refusal: str) -> str:
    """The containers Podman's refusal names, by name where it can still inspect them."""
    names = []
    for found in USED_BY.findall(refusal):
        record = read_as(target, user, podman_facts.container(found))
        names.append(str(record["Name"]) if record else found[:12])
    return ", ".join(names) or refusal.strip()[-300:]


def drop_reference(target: Target, user: str, reference: str, image: str) -> None:
    """`reference` gone from the user's Podman, never an image a container runs from. `rmi`
    without --force only untags a name the image shares; with its last name it removes the
    image, or refuses while a container uses it: then only the name goes, and the image stays,
    untagged, for as long as a container runs it (`podman image prune` reclaims it after)."""
    command = podman(user, "rmi", "--ignore", reference)
    removed = ssh.run(target, command, check=False)
    if removed.ok:
        return
    if removed.exit_status != IN_USE:
        raise command_failed(target, command, removed)
    ssh.run(target, podman(user, "untag", image, reference))
    users = image_users(target, user, removed.stderr)
    warn(f"{target.where()}: {reference} untagged, its image kept: {users} still runs it")


class OriginImageProvider(NodeProvider):
    """The image on the node it comes from: built there, or required to be there already."""

    INPUTS: ClassVar[tuple[str, ...]] = ("user", "reference", "containerfile", "keep")
    STATE: ClassVar[
        tuple[str, ...]
    ] = ()  # its id is whatever the build made: an output the other nodes must match
    DERIVED: ClassVar[tuple[str, ...]] = ("keep",)  # optional: images made before it lack it
    # Another reference (or user, or node) is another image; another containerfile is a rebuild
    # of the same one (update).
    REPLACE: ClassVar[tuple[str, ...]] = ("user", "reference")

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        # Not delete-first, as every other node resource: the new image comes in beside the old
        # one, the containers move to it, and the engine deletes the replaced Image once the
        # program is done. Deleted first, its name would go from under the containers.
        found = super().diff(_id, olds, news)
        found.delete_before_replace = False
        return found

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        if news.get("containerfile") and news["containerfile"] != olds.get("containerfile"):
            # The name moves to the new build; the containers follow its id, and the old image
            # stays, untagged, while they still run it.
            user, reference = str(news["user"]), str(news["reference"])
            self.build(target_of(news), user, reference, str(news["containerfile"]))
        return super().update(_id, olds, news)

    def identity(self, props: Props) -> str:
        return f"image {props['reference']}"

    def observe(self, target: Target, props: Props) -> Live | None:
        found = image_id(target, str(props["user"]), str(props["reference"]))
        return {"image_id": found} if found else None

    def apply(self, target: Target, props: Props, live: Live | None) -> dict[str, Any]:
        user, reference = str(props["user"]), str(props["reference"])
        if live is None and props["containerfile"]:
            self.build(target, user, reference, str(props["containerfile"]))
        elif live is None:
            raise SshError(f"{target.where()}: image {reference} is not present for user {user}")
        return {"restore": {"had_image": live is not None}}

    def build(self, target: Target, user: str, reference: str, containerfile: str) -> None:
        # A throwaway context: nothing of the build stays in the user's home.
        script = (
            "context=$(mktemp -d) && trap 'rm -rf -- \"$context\"' EXIT && "
            'cat > "$context/Containerfile" && '
            f'podman build -q --pull=never -t {shlex.quote(reference)} "$context"'
        )
        ssh.run(target, as_user(user, script), stdin=containerfile, timeout=SHIP_TIMEOUT_S)

    def remove(self, target: Target, props: Props) -> None:
        user, reference = str(props["user"]), str(props["reference"])
        stem = archive_stem(reference)  # the archives shipping kept here, if any
        ssh.run(target, as_user(user, f"rm -f -- {stem}@*.tar {stem}.lock"))
        if (props.get("restore") or {}).get("had_image"):
            return  # it was there before us
        if props.get("keep"):
            say(f"{target.where()}: kept image {reference} for a rollback ({PRUNE_HINT})")
            return
        found = image_id(target, user, reference)
        if found and found == (props.get("image_id") or found):
            drop_reference(target, user, reference, found)
        # else gone already, or the name is now another image's: not this resource's to remove


PRUNE_HINT = "`sparkrack images prune --stack <stack> --yes` removes it once unused"


class ShippedImageProvider(OriginImageProvider):
    """The image on any other node, shipped from the origin until its id matches."""

    INPUTS = ("user", "reference", "image_id", "source", "keep")
    DERIVED = ("keep",)  # optional: images made before it lack it
    STATE = ("image_id",)
    REPLACE = ("user", "reference")

    def apply(self, target: Target, props: Props, live: Live | None) -> dict[str, Any]:
        if live is None or live["image_id"] != props["image_id"]:
            self.ship(target, props, props["source"])
        return {"restore": {"had_image": live is not None}}

    def ship(self, target: Target, props: Props, source: Props) -> None:
        origin = Target.from_props(str(source["node"]), source["connection"])
        to, options = str(source["to"]), []
        if not to:  # a DHCP rail: the lease it holds now, its host key pinned by its name
            to, options = (
                leased_address(target, str(source["to_lease"])),
                [by_node_name(target.node)],
            )
        script = ship_script(
            props["reference"], props["image_id"], source["key_name"], props["user"], to, *options
        )
        try:
            ssh.run(origin, as_user(str(props["user"]), script), timeout=SHIP_TIMEOUT_S)
        except SshError as error:
            message = f"shipping {props['reference']} from {origin.node} failed: {error}"
            raise SshError(f"{target.where()}: {message}") from None


class Image(NodeResource, module=PULUMI_MODULE, name="Image"):
    """An image in the user's Podman on one node. Output: image_id, as the node reports it.

    With `ship_from` (the origin node's Image and how to reach this node from it) the image is
    shipped; without, it is built from `containerfile` or must already be there."""

    image_id: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        target: Target,
        user: str,
        reference: str,
        containerfile: str = "",
        ship_from: ShipFrom | None = None,
        keep: bool = False,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        props: dict[str, Any] = {"user": user, "reference": reference}
        if keep:  # replaced or destroyed, the image stays under its name: a rollback's
            props["keep"] = True
        provider: NodeProvider
        if ship_from is None:
            props |= {"containerfile": containerfile, "image_id": None}
            provider = OriginImageProvider()
        else:
            props |= {"image_id": ship_from.image.image_id, "source": ship_from.props()}
            provider = ShippedImageProvider()
        super().__init__(provider, name, target, props, opts)


class ShipFrom:
    """Where an image comes from: the origin's Image, its node, and this node's address there
    (`to`; on a DHCP rail "", and `to_lease` the netdev whose lease is read when shipping)."""

    def __init__(
        self, image: Image, origin: Target, to: str, key_name: str, to_lease: str | None = None
    ) -> None:
        self.image, self.origin = image, origin
        self.to, self.key_name, self.to_lease = to, key_name, to_lease

    def props(self) -> dict[str, Any]:
        props = {
            "node": self.origin.node,
            "connection": self.origin.connection_props(),
            "to": self.to,
            "key_name": self.key_name,
        }
        return props | ({"to_lease": self.to_lease} if self.to_lease else {})


# --- Container --------------------------------------------------------------------------------


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


JOURNAL_TAIL = 15  # lines of the unit's log quoted when its container does not run


def unit_outcome(target: Target, user: str, unit: str) -> str:
    """Why a container unit is not running, for the error: its state and its log's tail."""
    state = gather(target, journal.unit_outcome(unit, user))
    log = gather(target, journal.journal_tail(unit, state.pop("ExecMainPID", "0"), JOURNAL_TAIL))
    summary = " ".join(f"{key}={value}" for key, value in state.items()) or "no state"
    return f"{unit}: {summary}; its log ends:\n{log or '(empty)'}"


class ContainerProvider(NodeProvider):
    INPUTS = (
        "user", "home", "name", "image", "image_id", "env", "devices", "ulimits", "cpuset",
        "command", "restart", "running", "unit_sha256", "options", "part_of", "stop_timeout_s",
        "rollout",
    )  # fmt: skip
    STATE = ("running", "image_id", "env", "devices", "ulimits", "cpuset", "unit_sha256")
    REPLACE = ("user", "home", "name")
    # The last four are optional rather than derived: containers made before them lack them.
    # `rollout` is the engine's rollout it belongs to (EngineRollout): a new one restarts it.
    DERIVED = ("running", "unit_sha256", "options", "part_of", "stop_timeout_s", "rollout")

    def identity(self, props: Props) -> str:
        return f"container {props['name']} of {props['user']}"

    def validate(self, props: Props) -> list[CheckFailure]:
        if props["restart"] not in ("no", "on-failure", "always"):
            return [CheckFailure("restart", f"{props['restart']!r}: no, on-failure or always")]
        return []

    def derive(self, props: Props) -> dict[str, Any]:
        return {"running": True, "unit_sha256": sha256_of(quadlet_unit(props))}

    def host_kind(self, target: Target) -> HostKind:
        return gather(target, host_kind())

    def observe(self, target: Target, props: Props) -> Live | None:
        path, content = unit_file(props, self.host_kind(target))
        found_file = gather(target, file_state(path))
        inspected = inspect_container(target, str(props["user"]), str(props["name"]))
        if found_file is None and inspected is None:
            return None
        on_disk = found_file.sha256 if found_file else ""
        running = bool(inspected and inspected["State"]["Running"])
        return {
            # check() hashed the Quadlet unit; the right unit for this host reads as that too
            "unit_sha256": props["unit_sha256"] if on_disk == sha256_of(content) else on_disk,
            "running": running,
            "image_id": inspected["Image"] if inspected else "",
            "env": declared_env(inspected, sorted(props["env"])) if inspected else {},
            "devices": created_devices(inspected, props["devices"]) if inspected else [],
            "ulimits": created_ulimits(inspected, props["ulimits"]) if inspected else {},
            "cpuset": self.cpuset(target, props, inspected) if inspected and running else "",
        }

    def cpuset(self, target: Target, props: Props, inspected: dict[str, Any]) -> str:
        """The CPUs the container's first process may use; undeclared, any is right."""
        return cpus_allowed(target, inspected["State"]["Pid"]) if props["cpuset"] else ""

    def apply(self, target: Target, props: Props, live: Live | None) -> dict[str, Any]:
        user, host = str(props["user"]), self.host_kind(target)
        path, content = unit_file(props, host)
        # What the unit file and `enable` make in the user's ~/.config, for delete to take back.
        unit_dir = posixpath.dirname(path)
        made = gather(target, missing_directories(unit_dir, f"{unit_dir}/default.target.wants"))
        if live is None or live["unit_sha256"] != props["unit_sha256"]:
            write_file(target, path, content, "0644", user, user)
        unit = f"{props['name']}.service"
        if not host.quadlet:
            enable = systemctl("user", user, "enable", "--", unit)
            on_the_bus(lambda: ssh.run(target, enable, sudo=True))
        start = start_command(user, unit)
        on_the_bus(lambda: ssh.run(target, start, sudo=True, timeout=int(START_TIMEOUT_S) + 300))
        self.wait_running(target, props)
        return {"restore": {"made_dirs": made}}

    def wait_running(self, target: Target, props: Props) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            found = inspect_container(target, str(props["user"]), str(props["name"]))
            if found and found["State"]["Running"]:
                return
            time.sleep(1)
        why = unit_outcome(target, str(props["user"]), f"{props['name']}.service")
        raise SshError(f"{target.where()}: {self.identity(props)} not running after start; {why}")

    def remove(self, target: Target, props: Props) -> None:
        user, unit = str(props["user"]), f"{props['name']}.service"
        ssh.run(target, systemctl("user", user, "stop", unit), sudo=True, check=False)
        # A plain unit was enabled: its default.target.wants link goes before the file does.
        ssh.run(target, systemctl("user", user, "disable", "--", unit), sudo=True, check=False)
        for quadlet in (True, False):
            remove_file(target, unit_file(props, HostKind(quadlet, cgroup2=True))[0])
        reload = systemctl("user", user, "daemon-reload")
        on_the_bus(lambda: ssh.run(target, reload, sudo=True))
        ssh.run(target, podman(user, "rm", "--force", "--ignore", str(props["name"])))
        remove_directories(target, (props.get("restore") or {}).get("made_dirs") or [])


class Container(NodeResource, module=PULUMI_MODULE, name="Container"):
    """A rootless, host-network container run by the service user's systemd on one node.

    Outputs: running, image_id, env (the declared keys), cpuset (CPUs it may run on)."""

    running: pulumi.Output[bool]
    image_id: pulumi.Output[str]
    unit_sha256: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        target: Target,
        user: str,
        home: str,
        container: str,
        image: str,
        image_id: pulumi.Input[str],
        env: dict[str, str] | None = None,
        devices: list[str] | None = None,
        ulimits: dict[str, str] | None = None,
        cpuset: str = "",
        command: list[str] | None = None,
        restart: str = "on-failure",
        options: list[str] | None = None,
        part_of: str = "",
        stop_timeout_s: int | None = None,
        rollout: pulumi.Input[str] | None = None,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        props: dict[str, Any] = {
            "user": user,
            "home": home,
            "name": container,
            "image": image,
            "image_id": image_id,
            "env": env or {},
            "devices": devices or [],
            "ulimits": ulimits or {},
            "cpuset": cpuset,
            "command": command or [],
            "restart": restart,
            "running": None,
            "unit_sha256": None,
        }
        if options:  # further `podman run` options (mounts, /dev/shm); only when given, so
            props["options"] = options  # that containers made before them read unchanged
        if part_of:
            props["part_of"] = part_of
        if stop_timeout_s:
            props["stop_timeout_s"] = stop_timeout_s
        if rollout is not None:
            props["rollout"] = rollout
        super().__init__(ContainerProvider(), name, target, props, opts)

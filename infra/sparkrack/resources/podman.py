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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import pulumi
from pulumi.dynamic import CheckFailure, DiffResult, UpdateResult

from sparkrack.asking import gather
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
from sparkrack.resources.image_ship import SHIP_TIMEOUT_S, archive_stem, ship_script
from sparkrack.resources.links import leased_address
from sparkrack.resources.podman_reads import (
    cpus_allowed,
    created_devices,
    created_ulimits,
    declared_env,
    inspect_container,
    read_as,
    start_command,
    unit_outcome,
)
from sparkrack.resources.units import on_the_bus
from sparkrack.text.commands import as_user
from sparkrack.text.cpus import CpuList
from sparkrack.transport import ssh
from sparkrack.transport.target import SshError, Target, command_failed

START_TIMEOUT_S = 90.0


def podman(user: str, *args: str) -> str:
    return as_user(user, shlex.join(["podman", *args]))


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


@dataclass(frozen=True)
class ImageArgs:
    """An image in `user`'s Podman: shipped with `ship_from`; without, built from
    `containerfile`, or required to be there already. With `keep`, replaced or destroyed, it
    stays under its name: a rollback's."""

    target: Target
    user: str
    reference: str
    containerfile: str = ""
    ship_from: ShipFrom | None = None
    keep: bool = False


class Image(NodeResource, module=PULUMI_MODULE, name="Image"):
    """An image in the user's Podman on one node. Output: image_id, as the node reports it.

    With `ship_from` (the origin node's Image and how to reach this node from it) the image is
    shipped; without, it is built from `containerfile` or must already be there."""

    image_id: pulumi.Output[str]

    def __init__(
        self, name: str, args: ImageArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        props: dict[str, Any] = {"user": args.user, "reference": args.reference}
        if args.keep:
            props["keep"] = True
        provider: NodeProvider
        if args.ship_from is None:
            props |= {"containerfile": args.containerfile, "image_id": None}
            provider = OriginImageProvider()
        else:
            source = args.ship_from
            props |= {"image_id": source.image.image_id, "source": source.props()}
            provider = ShippedImageProvider()
        super().__init__(provider, name, args.target, props, opts)


@dataclass(frozen=True)
class ShipFrom:
    """Where an image comes from: the origin's Image, its node, and this node's address there
    (`to`; on a DHCP rail "", and `to_lease` the netdev whose lease is read when shipping),
    shipped with the origin's key `key_name`."""

    image: Image
    origin: Target
    to: str
    key_name: str
    to_lease: str | None = None

    def props(self) -> dict[str, Any]:
        props = {
            "node": self.origin.node,
            "connection": self.origin.connection_props(),
            "to": self.to,
            "key_name": self.key_name,
        }
        return props | ({"to_lease": self.to_lease} if self.to_lease else {})


# --- Container --------------------------------------------------------------------------------


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
        """The CPUs the container's first process may use, spelled as declared when they are the
        declared ones (only the set counts: CpuList.holds); undeclared, any is right."""
        if not props["cpuset"]:
            return ""
        found = cpus_allowed(target, inspected["State"]["Pid"])
        return props["cpuset"] if CpuList.parse(props["cpuset"]).holds(found) else found

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


@dataclass(frozen=True)
class ContainerArgs:
    """A container `name` of `user` (whose home holds its unit) from `image`, pinned to
    `image_id`. `options`: further `podman run` options (mounts, /dev/shm, health); `part_of`:
    the container of the node it stops and restarts with; `rollout`: the engine rollout it
    belongs to (EngineRollout), whose new generation restarts it."""

    target: Target
    user: str
    home: str
    name: str
    image: str
    image_id: pulumi.Input[str]
    env: Mapping[str, str] = field(default_factory=dict)
    devices: Sequence[str] = ()
    ulimits: Mapping[str, str] = field(default_factory=dict)
    cpuset: str = ""
    command: Sequence[str] = ()
    restart: str = "on-failure"
    options: Sequence[str] = ()
    part_of: str = ""
    stop_timeout_s: int | None = None
    rollout: pulumi.Input[str] | None = None

    def props(self) -> dict[str, Any]:
        """The provider's inputs; the optional ones only when given, so that containers made
        before them read unchanged."""
        props: dict[str, Any] = {
            "user": self.user,
            "home": self.home,
            "name": self.name,
            "image": self.image,
            "image_id": self.image_id,
            "env": dict(self.env),
            "devices": list(self.devices),
            "ulimits": dict(self.ulimits),
            "cpuset": self.cpuset,
            "command": list(self.command),
            "restart": self.restart,
            "running": None,
            "unit_sha256": None,
        }
        if self.options:
            props["options"] = list(self.options)
        if self.part_of:
            props["part_of"] = self.part_of
        if self.stop_timeout_s:
            props["stop_timeout_s"] = self.stop_timeout_s
        if self.rollout is not None:
            props["rollout"] = self.rollout
        return props


class Container(NodeResource, module=PULUMI_MODULE, name="Container"):
    """A rootless, host-network container run by the service user's systemd on one node.

    Outputs: running, image_id, env (the declared keys), cpuset (CPUs it may run on)."""

    running: pulumi.Output[bool]
    image_id: pulumi.Output[str]
    unit_sha256: pulumi.Output[str]

    def __init__(
        self, name: str, args: ContainerArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(ContainerProvider(), name, args.target, args.props(), opts)

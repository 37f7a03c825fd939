"""What a user's rootless Podman holds: an image's id, a container's inspect record and log,
and whether it is rootless at all.

The commands are bare `podman ...`: a reader runs them as the service user with `Fact.as_user`.
A missing image or container reads as absence, not as an error.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass
from typing import Any, Literal, get_args

from sparkrack.facts import Fact


def parse_image_id(stdout: str) -> str:
    """The id, or '' when the user's Podman has no such image."""
    return stdout.strip()


def image_id(reference: str) -> Fact[str]:
    inspect = f"podman image inspect --format '{{{{.Id}}}}' {shlex.quote(reference)}"
    return Fact(f"{inspect} 2>/dev/null || true", parse_image_id)


@dataclass(frozen=True)
class StoredImage:
    """An image in the user's storage: what housekeeping lists and may prune."""

    id: str
    names: tuple[str, ...]  # every reference it is tagged with; () when untagged
    size: int  # bytes
    created: int  # unix seconds
    containers: int  # containers made from it, in any state


def parse_images(stdout: str) -> tuple[StoredImage, ...]:
    """`podman images --format json`: every image, newest first. No output is no reading."""
    if not stdout.strip():
        raise ValueError("podman printed no image list")
    found = (
        StoredImage(
            id=str(record["Id"]),
            names=tuple(record.get("Names") or ()),
            size=int(record.get("Size") or 0),
            created=int(record.get("Created") or 0),
            containers=int(record.get("Containers") or 0),
        )
        for record in json.loads(stdout)
    )
    return tuple(sorted(found, key=lambda image: -image.created))


def images() -> Fact[tuple[StoredImage, ...]]:
    return Fact("podman images --format json", parse_images)


def parse_container(stdout: str) -> dict[str, Any] | None:
    """`podman container inspect`'s record (State, Config.Env, HostConfig, ...), or None."""
    found = json.loads(stdout) if stdout.strip() else []
    return dict(found[0]) if found else None


def container(name: str) -> Fact[dict[str, Any] | None]:
    inspect = f"podman container inspect {shlex.quote(name)}"
    return Fact(f"{inspect} 2>/dev/null || true", parse_container)


# Every container of the user in one `podman container inspect`: a rootless Podman start costs a
# node about 0.1 s of CPU, and in a refresh this one answer serves every Container on the node
# (asking.shared) where each used to start its own. A container removed between the listing and
# the inspect makes inspect exit 125 after printing the others: that is still the reading.
ALL_CONTAINERS = (
    "ids=$(podman ps -aq) || exit 1; "
    "[ -n \"$ids\" ] || { echo '[]'; exit 0; }; "
    "podman container inspect $ids 2>/dev/null; exit 0"
)


def parse_containers(stdout: str) -> dict[str, dict[str, Any]]:
    """Each container's inspect record by name. No output at all is no reading (Podman failed),
    not a user without containers, which prints `[]`."""
    if not stdout.strip():
        raise ValueError("podman printed no container records")
    return {str(record["Name"]): dict(record) for record in json.loads(stdout)}


def containers() -> Fact[dict[str, dict[str, Any]]]:
    return Fact(ALL_CONTAINERS, parse_containers)


def container_env(record: dict[str, Any]) -> dict[str, str]:
    """An inspect record's Config.Env (`KEY=value` items) as a mapping."""
    return dict(item.partition("=")[::2] for item in record["Config"]["Env"])


def created_with(record: dict[str, Any], option: str) -> list[str]:
    """The values the container was created with for `option` (`--device`, `--ulimit`), in
    order, as its inspect record keeps the command line that created it (`podman run` from a
    plain unit, or Quadlet's; `--opt=value` and `--opt value` alike)."""
    words = record["Config"].get("CreateCommand") or []
    values = []
    for i, word in enumerate(words):
        if word.startswith(f"{option}="):
            values.append(word.split("=", 1)[1])
        elif word == option and i + 1 < len(words):
            values.append(words[i + 1])
    return values


def parse_rootless(stdout: str) -> bool | None:
    """Whether the reading user's Podman runs rootless; None when `podman info` answered nothing."""
    answer = stdout.strip()
    return answer == "true" if answer else None


def rootless() -> Fact[bool | None]:
    info = "podman info --format '{{.Host.Security.Rootless}}'"
    return Fact(f"{info} 2>/dev/null || true", parse_rootless)


ABSENT = "#absent"


# Podman's k8s-file log driver writes `<time> <stream> <P|F> <text>`: a partial (P) line goes
# on in the next record. Only its end is read: the file is bounded (max-size) but large.
K8S_RECORD = re.compile(r"^\S+ (?:stdout|stderr) (?P<flag>[PF]) ?(?P<text>.*)$")
LOG_TAIL_BYTES = 8 * 1024 * 1024


def parse_log_file(stdout: str) -> tuple[str, ...] | None:
    """The log's lines, partial records joined (the last one even unfinished); None when there
    is no such file. A record the tail cut in its middle does not match, and is dropped."""
    if stdout.strip() == ABSENT:
        return None
    lines, pending = [], ""
    for record in stdout.splitlines():
        matched = K8S_RECORD.match(record)
        if matched is None:
            continue
        pending += matched["text"]
        if matched["flag"] == "F":
            lines.append(pending)
            pending = ""
    return tuple([*lines, pending] if pending else lines)


def log_file(path: str) -> Fact[tuple[str, ...] | None]:
    """A container's k8s-file log on the node: it outlives the container (a refusing engine's
    is gone a moment after its last words), and every start appends to it."""
    quoted = shlex.quote(path)
    command = (
        f"if [ -f {quoted} ]; then tail -c {LOG_TAIL_BYTES} {quoted}; "
        f"else echo {shlex.quote(ABSENT)}; fi"
    )
    return Fact(command, parse_log_file)


# Where sparkrack keeps a Podman secret's value: the service user's runtime directory, a tmpfs
# of its own (0700): never on disk, where Podman's default file driver keeps it (base64, in the
# user's storage). A reboot clears it. A shell word: $XDG_RUNTIME_DIR expands as the user.
SECRET_STORE = '"$XDG_RUNTIME_DIR"/sparkrack-secrets'
SecretPlace = Literal["stored", "lost", "on-disk"]
SECRET_PLACES: tuple[SecretPlace, ...] = get_args(SecretPlace)


def parse_secret_place(stdout: str) -> SecretPlace | None:
    word = stdout.strip()
    if word == "absent":
        return None
    if word not in SECRET_PLACES:
        raise ValueError(f"not a secret's place: {word!r}")
    return word


def secret_place(name: str) -> Fact[SecretPlace | None]:
    """Where a Podman secret's value is (never the value): `stored` in SECRET_STORE, `lost` from
    it (the secret is declared, its value gone with the runtime directory: a reboot), `on-disk`
    (another driver path: Podman's default), or None without such a secret."""
    path = shlex.quote('{{index .Spec.Driver.Options "path"}} {{.ID}}')
    command = (
        f"set -- $(podman secret inspect --format {path} {shlex.quote(name)} 2>/dev/null); "
        'if [ -z "$1" ]; then echo absent; '
        f'elif [ "$1" != {SECRET_STORE} ]; then echo on-disk; '
        'elif grep -qF "\\"$2\\":" "$1/secretsdata.json" 2>/dev/null; then echo stored; '
        "else echo lost; fi"
    )
    return Fact(command, parse_secret_place)

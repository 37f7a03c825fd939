"""CdiSpec: the node's CDI spec for its NVIDIA GPUs, generated for the driver that is loaded.

Rootless Podman gives a container its GPU by CDI name (`--device nvidia.com/gpu=all`); the spec
that resolves the name is nvidia-container-toolkit's (`nvidia-ctk cdi generate`), and it mounts
the driver's libraries by their versioned names. A driver upgrade leaves the spec pointing at
files that are gone, so a read compares the spec's driver with the loaded one: `driver` reads
`the loaded driver` when they agree, and otherwise names both, which `pulumi preview --refresh`
shows as drift; `up` generates the spec again.

The spec is written whole or not at all: nvidia-ctk writes into a fresh directory beside it, and
only a complete file is renamed over the old one. The directory, not a temporary file name, because
nvidia-ctk appends `.yaml` to a name without a spec's extension, and a CDI registry reads every
`*.yaml` in /etc/cdi (a second spec declaring the same devices is a conflict) but never a
subdirectory.

Delete removes the spec only when this resource created it (none was there before), as Packages
removes only what it installed: a spec the node had (the operator's, DGX OS's) is not ours, and
one we made goes with the stack, before the toolkit it calls in its hooks may go too. With
nvidia-container-toolkit 1.18 and later, its own nvidia-cdi-refresh service keeps a spec in
/var/run/cdi for every other user of the node's GPUs; a CDI registry ranks that directory above
/etc/cdi, so where both declare `nvidia.com/gpu=all` Podman takes that one (the service, too,
generates it again when the driver changes).
"""

from __future__ import annotations

import posixpath
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import pulumi
from pulumi.dynamic import CheckFailure

from sparkrack.asking import gather
from sparkrack.facts.gpu import DRIVER_VERSION_FILE, cdi_spec, running_driver, toolkit_version
from sparkrack.resources.base import PULUMI_MODULE, Live, NodeProvider, NodeResource, Props
from sparkrack.transport import ssh
from sparkrack.transport.target import SshError, Target

LOADED = "the loaded driver"  # what `driver` reads when the spec is for the driver now loaded
TEMP_MARK = ".sparkrack-tmp."
GENERATE_TIMEOUT_S = 300
SPEC_EXTENSIONS = (".yaml", ".json")  # what nvidia-ctk and CDI registries take as a spec

Toolkit = Literal["preinstalled", "apt"]


def driver_reading(spec: str | None, loaded: str | None) -> str:
    """LOADED when the spec is for the loaded driver; otherwise both sides, for the diff."""
    if loaded is not None and spec == loaded:
        return LOADED
    generated = f"generated for {spec}" if spec else "no driver library in the spec"
    running = f"{loaded} is loaded" if loaded else f"no driver is loaded ({DRIVER_VERSION_FILE})"
    return f"{generated}; {running}"


def generate_script(path: str) -> str:
    """A POSIX sh script, run as root, that generates the spec at `path`, all or nothing."""
    directory, name = posixpath.split(path)
    prefix = f"{directory}/.{name}{TEMP_MARK}"
    return "; ".join(
        [
            "set -eu",
            f"mkdir -p -- {shlex.quote(directory)}",
            # One writer per path: what a killed earlier run left (no trap runs on SIGKILL) goes.
            f"rm -rf -- {shlex.quote(prefix)}*",
            f"tmp=$(mktemp -d {shlex.quote(prefix + 'XXXXXX')})",
            "trap 'rm -rf -- \"$tmp\"' EXIT",
            "trap 'exit 1' HUP INT TERM",
            f'nvidia-ctk cdi generate --output="$tmp"/{shlex.quote(name)}',
            f'mv -f -- "$tmp"/{shlex.quote(name)} {shlex.quote(path)}',
        ]
    )


def missing_toolkit(target: Target, props: Props) -> str:
    package = str(props["toolkit_package"])
    if props["toolkit"] == "preinstalled":
        how = f"DGX OS ships nvidia-container-toolkit; install it (apt-get install {package})"
    else:
        how = f"the {package} package is installed but gives no nvidia-ctk; reinstall it"
    return f"{target.where()}: no nvidia-ctk to generate the CDI spec: {how}"


def no_driver(target: Target) -> str:
    return (
        f"{target.where()}: no NVIDIA driver is loaded ({DRIVER_VERSION_FILE} is absent), so "
        "there is nothing to generate a CDI spec for: install the NVIDIA driver, then reboot"
    )


class CdiSpecProvider(NodeProvider):
    INPUTS = ("path", "devices", "driver", "toolkit", "toolkit_package")
    STATE = ("devices", "driver")
    REPLACE = ("path",)
    DERIVED = ("driver",)

    def identity(self, props: Props) -> str:
        return f"CDI spec {props['path']}"

    def validate(self, props: Props) -> list[CheckFailure]:
        path = str(props["path"])
        if not posixpath.isabs(path) or not path.endswith(SPEC_EXTENSIONS):
            return [CheckFailure("path", f"{path!r}: an absolute path ending in .yaml or .json")]
        if not props["devices"]:
            return [CheckFailure("devices", "name at least one CDI device")]
        if props["toolkit"] not in ("preinstalled", "apt"):
            return [CheckFailure("toolkit", f"{props['toolkit']!r}: preinstalled or apt")]
        return []

    def derive(self, props: Props) -> dict[str, Any]:
        return {"devices": sorted(set(props["devices"])), "driver": LOADED}

    def observe(self, target: Target, props: Props) -> Live | None:
        spec = gather(target, cdi_spec(str(props["path"])))
        if spec is None:
            return None
        loaded = gather(target, running_driver())
        return {
            "devices": sorted(set(props["devices"]) & set(spec.devices)),
            "driver": driver_reading(spec.driver, loaded),
            "spec_driver": spec.driver,
            "loaded_driver": loaded,
            "spec_devices": list(spec.devices),
        }

    def apply(self, target: Target, props: Props, live: Live | None) -> dict[str, Any]:
        restore = {"restore": {"generated": live is None}}
        if live is not None and all(live[key] == props[key] for key in self.STATE):
            return restore  # already the spec of the loaded driver, with every device wanted
        if gather(target, running_driver()) is None:
            raise SshError(no_driver(target))
        if gather(target, toolkit_version()) is None:
            raise SshError(missing_toolkit(target, props))
        ssh.run(target, generate_script(str(props["path"])), sudo=True, timeout=GENERATE_TIMEOUT_S)
        return restore  # the read-back names a wanted device the new spec still lacks

    def remove(self, target: Target, props: Props) -> None:
        if (props.get("restore") or {}).get("generated"):
            ssh.run(target, f"rm -f -- {shlex.quote(str(props['path']))}", sudo=True)

    def undo(self, target: Target, props: Props, before: Live | None) -> None:
        if before is None:  # the spec this create generated, if it got that far
            ssh.run(target, f"rm -f -- {shlex.quote(str(props['path']))}", sudo=True)


@dataclass(frozen=True)
class CdiSpecArgs:
    """The spec at `path` declaring `devices`, generated by `toolkit` (its package named)."""

    target: Target
    path: str
    devices: Sequence[str]
    toolkit: Toolkit
    toolkit_package: str


class CdiSpec(NodeResource, module=PULUMI_MODULE, name="CdiSpec"):
    """The node's CDI spec at `path`, declaring `devices`, generated for the loaded driver.
    Outputs: devices (those of the wanted it declares), driver (LOADED, or what differs),
    spec_driver and loaded_driver (versions), spec_devices (every name the spec declares)."""

    devices: pulumi.Output[list[str]]
    driver: pulumi.Output[str]

    def __init__(
        self, name: str, args: CdiSpecArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        props = {
            "path": args.path,
            "devices": list(args.devices),
            "toolkit": args.toolkit,
            "toolkit_package": args.toolkit_package,
            "driver": None,
        }
        super().__init__(CdiSpecProvider(), name, args.target, props, opts)

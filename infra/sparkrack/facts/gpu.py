"""The node's GPUs as containers get them: the loaded NVIDIA driver, the CDI spec that
nvidia-container-toolkit generated for it, the toolkit itself, and the GPUs a container sees.

A CDI spec names the driver's libraries by their versioned file names (`libcuda.so.580.95.05`),
so a spec generated before a driver upgrade points at files that are gone: its driver version
against the loaded driver's is what tells a stale spec.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

import yaml

from sparkrack.config.yamlload import load_yaml
from sparkrack.facts import Fact
from sparkrack.text.commands import podman_exec

# The loaded module's version as sysfs shows it (the kernel's MODULE_VERSION of nvidia.ko, open
# or proprietary alike): one line, '580.95.05'. /proc/driver/nvidia/version says the same in a
# longer line; sysfs is read because nothing may be mounted over /proc on a node whose rootless
# Podman must mount a fresh proc (the kernel then refuses it), which the simulator needs to fake it.
DRIVER_VERSION_FILE = "/sys/module/nvidia/version"
VERSION = re.compile(r"\d+\.\d+(?:\.\d+)*")


def parse_driver_version(stdout: str) -> str | None:
    """'580.95.05'; None without a loaded driver (no such file)."""
    text = stdout.strip()
    if text and not VERSION.fullmatch(text):
        raise ValueError(f"no driver version in {text!r}")
    return text or None


def running_driver() -> Fact[str | None]:
    """The loaded kernel module's version: what the driver's user-space libraries must match."""
    return Fact(f"cat {DRIVER_VERSION_FILE} 2>/dev/null || true", parse_driver_version)


@dataclass(frozen=True)
class CdiSpecFile:
    """What a CDI spec declares: its kind, its devices' qualified names, the driver it is for."""

    kind: str  # 'nvidia.com/gpu'; '' when the file is no CDI spec at all
    devices: tuple[str, ...]  # 'nvidia.com/gpu=0', 'nvidia.com/gpu=all', ... in file order
    driver: str | None  # None when no versioned driver library is mounted


ABSENT = "#absent"
# nvidia-ctk finds the driver's version by these libraries' suffixes, libcuda.so first
# (internal/lookup/root: inferVersion); it then mounts every `*.so.<version>` library it finds.
DRIVER_LIBRARIES = ("libcuda.so.", "libnvidia-ml.so.")
NOT_A_SPEC = CdiSpecFile(kind="", devices=(), driver=None)


def spec_edits(spec: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The spec's container edits: the common ones, then each device's."""
    yield spec.get("containerEdits") or {}
    for device in spec.get("devices") or []:
        yield device.get("containerEdits") or {}


def spec_driver(spec: dict[str, Any]) -> str | None:
    """The driver version in the file names of the mounted driver libraries."""
    names = [
        PurePosixPath(str(mount.get("hostPath", ""))).name
        for edits in spec_edits(spec)
        for mount in edits.get("mounts") or []
    ]
    for library in DRIVER_LIBRARIES:
        for name in names:
            version = name.removeprefix(library)
            if name.startswith(library) and VERSION.fullmatch(version):
                return version
    return None


def parse_cdi_spec(stdout: str) -> CdiSpecFile | None:
    """A spec as nvidia-ctk writes it (YAML, or JSON for a .json name), None when absent. A
    file that is no spec (empty, truncated, not YAML) reads as one declaring nothing: a
    reading, so that `up` generates it again, not a failed refresh."""
    if stdout.strip() == ABSENT:
        return None
    try:
        spec = load_yaml(stdout)
    except yaml.YAMLError:
        return NOT_A_SPEC
    if not isinstance(spec, dict) or not isinstance(spec.get("kind"), str):
        return NOT_A_SPEC
    kind, devices = spec["kind"], spec.get("devices") or []
    names = tuple(f"{kind}={device['name']}" for device in devices if "name" in device)
    return CdiSpecFile(kind=kind, devices=names, driver=spec_driver(spec))


def cdi_spec(path: str) -> Fact[CdiSpecFile | None]:
    """The CDI spec at `path`, read as root (nothing says the operator's copy is world-readable)."""
    quoted = shlex.quote(path)
    command = f"if [ -e {quoted} ]; then cat {quoted}; else echo {shlex.quote(ABSENT)}; fi"
    return Fact(command, parse_cdi_spec, sudo=True)


def parse_toolkit_version(stdout: str) -> str | None:
    """'1.17.8' from 'NVIDIA Container Toolkit CLI version 1.17.8' (then `commit: ...`); None
    when nvidia-ctk is not there; its whole first line when it prints another shape."""
    first = stdout.strip().splitlines()[0] if stdout.strip() else ""
    if not first:
        return None
    found = re.search(r"\bversion\s+(\S+)", first)
    return found.group(1) if found else first


def toolkit_version() -> Fact[str | None]:
    """nvidia-container-toolkit's CLI, which generates the CDI spec: its version, or None."""
    return Fact("nvidia-ctk --version 2>/dev/null || true", parse_toolkit_version)


FAILED = "#failed"
GPU_LINE = re.compile(r"GPU \d+: ")


@dataclass(frozen=True)
class GpusSeen:
    """The GPUs `nvidia-smi -L` lists in a container ('GPU 0: NVIDIA GB10 (UUID: GPU-...)'),
    and, when it failed, its last words."""

    gpus: tuple[str, ...]
    error: str = ""


def parse_gpus_seen(stdout: str) -> GpusSeen:
    lines = stdout.strip().splitlines()
    failed = bool(lines) and lines[-1] == FAILED
    if failed:
        lines = lines[:-1]
    gpus = tuple(line for line in lines if GPU_LINE.match(line))  # MIG lines are indented
    error = (lines[-1].strip() if lines else "no output") if failed else ""
    return GpusSeen(gpus, error)


def gpus_in(container: str) -> Fact[GpusSeen]:
    """The GPUs a running container sees; read it with `.as_user(user)`, the engine's Podman.
    With CDI, nvidia-smi is among what the spec mounts into the container."""
    listing = podman_exec(container, ["nvidia-smi", "-L"])
    return Fact(f"{listing} 2>&1 || echo {shlex.quote(FAILED)}", parse_gpus_seen)

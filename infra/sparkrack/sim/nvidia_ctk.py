#!/usr/bin/env python3
"""A stand-in `nvidia-ctk` for simulated nodes: NOT NVIDIA's. It answers `--version` and
`cdi generate`, the two calls the base role makes, as nvidia-container-toolkit 1.18 does.

Installed as /usr/bin/nvidia-ctk in the node image (DGX OS ships the toolkit). `cdi generate`
finds what the real one finds on a node, the way it finds it: the driver's version from the
libcuda.so.<version> it mounts, every library of that version, the GPUs through nvidia-smi (the
real one asks NVML), the device nodes under /dev, and nvidia-smi itself; then it writes a CDI spec
in the real one's shape (ordered YAML, 4-space indents: see the golden
tests/unit/golden/facts/gpu.cdi_spec.gb10-toolkit-1.18.yaml). Podman resolves
`nvidia.com/gpu=all` from that spec as it would from NVIDIA's: the container gets the device
nodes, the libraries and nvidia-smi. The real spec's hooks (nvidia-cdi-hook: library symlinks,
ld cache) are left out: the sim has no nvidia-cdi-hook and no program here loads a library.

Standard library only: it runs on the node's python3.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

VERSION_LINES = (
    "NVIDIA Container Toolkit CLI version 1.18.0",
    "commit: sparkrack-sim (a stand-in, not NVIDIA's nvidia-ctk)",
)
KIND = "nvidia.com/gpu"
CDI_VERSION = "0.5.0"
DEV = Path("/dev")
LIBRARY_DIRS = ("/usr/lib/*-linux-gnu", "/usr/lib64")
CONTROL_NODES = ("nvidia-modeset", "nvidia-uvm", "nvidia-uvm-tools", "nvidiactl")
BINARIES = ("/usr/bin/nvidia-smi",)
MOUNT_OPTIONS = ("ro", "nosuid", "nodev", "rbind", "rprivate")
SPEC_EXTENSIONS = (".yaml", ".json")


class GenerateError(Exception):
    """Why no spec was written, in the words the real one logs."""


def driver_libraries(root: Path = Path("/")) -> tuple[str, list[Path]]:
    """The driver's version (libcuda.so.<version>'s suffix) and every library of that version."""
    for pattern in LIBRARY_DIRS:
        for directory in sorted(root.glob(pattern.lstrip("/"))):
            for libcuda in sorted(directory.glob("libcuda.so.*.*")):
                version = libcuda.name.removeprefix("libcuda.so.")
                return version, sorted(directory.glob(f"lib*.so.{version}"))
    raise GenerateError("failed to initialize NVML: ERROR_LIBRARY_NOT_FOUND")


def gpu_uuids() -> list[tuple[str, str]]:
    """(index, UUID) of every GPU, as NVML would enumerate them (here: through nvidia-smi)."""
    query = ["nvidia-smi", "--query-gpu=index,uuid", "--format=csv,noheader"]
    done = subprocess.run(query, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise GenerateError(f"failed to initialize NVML: {done.stdout.strip() or done.stderr}")
    rows = [line.split(", ") for line in done.stdout.splitlines() if line.strip()]
    return [(index, uuid) for index, uuid in rows]


def device_node_lines(paths: list[str], indent: str) -> list[str]:
    lines = [f"{indent}deviceNodes:"]
    for path in paths:
        lines += [f"{indent}    - path: {path}", f"{indent}      hostPath: {path}"]
    return lines


def mount_lines(paths: list[str]) -> list[str]:
    lines = ["    mounts:"]
    for path in paths:
        lines += [f"        - hostPath: {path}", f"          containerPath: {path}"]
        lines += ["          options:", *(f"            - {option}" for option in MOUNT_OPTIONS)]
    return lines


def render_spec(gpus: list[tuple[str, str]], control: list[str], mounts: list[str]) -> str:
    """The spec, in the order and indentation nvidia-ctk 1.18 writes it."""
    lines = ["---", f"cdiVersion: {CDI_VERSION}", f"kind: {KIND}", "devices:"]
    all_nodes = [f"{DEV}/nvidia{index}" for index, _ in gpus]
    named = [(f'"{index}"', [path]) for (index, _), path in zip(gpus, all_nodes, strict=True)]
    named += [(uuid, [path]) for (_, uuid), path in zip(gpus, all_nodes, strict=True)]
    for name, nodes in [*named, ("all", all_nodes)]:
        lines += [f"    - name: {name}", "      containerEdits:"]
        lines += device_node_lines(nodes, "        ")
    lines += ["containerEdits:", "    env:", "        - NVIDIA_VISIBLE_DEVICES=void"]
    lines += device_node_lines(control, "    ")
    return "\n".join([*lines, *mount_lines(mounts)]) + "\n"


def generate() -> str:
    version, libraries = driver_libraries()
    gpus = gpu_uuids()
    if not gpus:
        raise GenerateError("failed to create device CDI specs: no NVIDIA devices found")
    control = [str(DEV / name) for name in CONTROL_NODES if (DEV / name).exists()]
    binaries = [path for path in BINARIES if os.path.exists(path)]
    log(f"Using driver version {version}")
    return render_spec(gpus, control, [*map(str, libraries), *binaries])


def output_path(args: list[str]) -> str | None:
    """--output=PATH or --output PATH; a name without a spec's extension gets `.yaml`."""
    for i, arg in enumerate(args):
        value = arg.split("=", 1)[1] if arg.startswith("--output=") else None
        if arg == "--output" and i + 1 < len(args):
            value = args[i + 1]
        if value is not None:
            return value if value.endswith(SPEC_EXTENSIONS) else f"{value}.yaml"
    return None


def log(message: str, level: str = "info") -> None:
    sys.stderr.write(f'time="now" level={level} msg="{message}"\n')


def cdi_generate(args: list[str]) -> int:
    try:
        spec = generate()
    except GenerateError as error:
        log(f"failed to generate CDI spec: {error}", "error")
        return 1
    path = output_path(args)
    if path is None:
        sys.stdout.write(spec)
        return 0
    Path(path).parent.mkdir(parents=True, exist_ok=True)  # as the real one makes /etc/cdi
    Path(path).write_text(spec)
    os.chmod(path, 0o644)
    log(f"Generated CDI spec with version {CDI_VERSION}")
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] in (["--version"], ["-v"]):
        print("\n".join(VERSION_LINES))
        return 0
    if argv[:2] == ["cdi", "generate"]:
        return cdi_generate(argv[2:])
    words = " ".join(argv) or "nothing"
    sys.stderr.write(f"nvidia-ctk stand-in: only --version and cdi generate, not {words}\n")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

#!/usr/bin/env python3
"""A stand-in `nvidia-smi` for simulated nodes: answers as a DGX Spark's GB10 does.

Installed as /usr/bin/nvidia-smi in the node image, and mounted into a container by the CDI spec
the node's nvidia-ctk stand-in generates, as the real spec mounts the real one. Standard library
only, because it runs on the node's python3 or the container's. It covers what exporters and
checks call: `-L`, `--query-gpu=... --format=csv` (with `noheader` and `nounits`) and the bare
summary. Like the real GB10, it has no dedicated memory and no fan tachometer: those fields read
`[N/A]` (and the memory controller's utilization reads 0).

Like the real one, it sees a GPU only through the driver's device nodes: without /dev/nvidiactl
it cannot reach the driver, and without /dev/nvidia0 it finds no device. A container given no
CDI device has neither (nor this program).
"""

from __future__ import annotations

import socket
import stat
import sys
import uuid
from pathlib import Path

NAME = "NVIDIA GB10"
DRIVER_VERSION = "580.95.05"
CUDA_VERSION = "13.0"
NOT_AVAILABLE = "[N/A]"
DEV = Path("/dev")
# nvidia-smi's words and exit codes (NVML_ERROR_DRIVER_NOT_LOADED is 9; no device found, 6).
NO_DRIVER = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that"
    " the latest NVIDIA driver is installed and running.\n",
    9,
)
NO_DEVICE = ("No devices were found\n", 6)

# field -> (header unit, value). A value of NOT_AVAILABLE is printed as is, units or not. Which
# fields a GB10 leaves [N/A] follows public captures (tests/unit/test_sim_nvidia_smi.py): memory
# sizes are, utilization.memory is not (it reads 0).
FIELDS: dict[str, tuple[str, str]] = {
    "index": ("", "0"),
    "name": ("", NAME),
    "driver_version": ("", DRIVER_VERSION),
    "compute_cap": ("", "12.1"),
    "pci.bus_id": ("", "0000000F:01:00.0"),
    "pstate": ("", "P0"),
    "memory.total": ("MiB", NOT_AVAILABLE),
    "memory.used": ("MiB", NOT_AVAILABLE),
    "memory.free": ("MiB", NOT_AVAILABLE),
    "fan.speed": ("%", NOT_AVAILABLE),
    "temperature.gpu": ("", "41"),
    "power.draw": ("W", "11.52"),
    "utilization.gpu": ("%", "0"),
    "utilization.memory": ("%", "0"),
    "clocks.sm": ("MHz", "2418"),
    "clocks.mem": ("MHz", NOT_AVAILABLE),
}
ALIASES = {"gpu_name": "name", "gpu_bus_id": "pci.bus_id", "count": "count"}


def gpu_uuid(hostname: str) -> str:
    return f"GPU-{uuid.uuid5(uuid.NAMESPACE_DNS, 'sparkrack-sim.' + hostname)}"


def field_value(field: str, hostname: str) -> tuple[str, str]:
    """(header unit, value) of one --query-gpu field; KeyError for one nvidia-smi lacks."""
    field = ALIASES.get(field, field)
    if field == "uuid":
        return "", gpu_uuid(hostname)
    if field == "count":
        return "", "1"
    return FIELDS[field]


def query_csv(fields: list[str], format_options: set[str], hostname: str) -> str:
    values = [field_value(field, hostname) for field in fields]
    lines = []
    if "noheader" not in format_options:
        headers = [
            f"{field} [{unit}]" if unit and "nounits" not in format_options else field
            for field, (unit, _) in zip(fields, values, strict=True)
        ]
        lines.append(", ".join(headers))
    row = [
        value
        if value == NOT_AVAILABLE or "nounits" in format_options or not unit
        else f"{value} {unit}"
        for unit, value in values
    ]
    lines.append(", ".join(row))
    return "\n".join(lines) + "\n"


def list_gpus(hostname: str) -> str:
    return f"GPU 0: {NAME} (UUID: {gpu_uuid(hostname)})\n"


def summary(hostname: str) -> str:
    return (
        f"| NVIDIA-SMI {DRIVER_VERSION}    Driver Version: {DRIVER_VERSION}    "
        f"CUDA Version: {CUDA_VERSION} |\n"
        f"|   0  {NAME}  On  | 0000000F:01:00.0 Off | {NOT_AVAILABLE} |\n"
        f"| {NOT_AVAILABLE}  41C  P0  11W / {NOT_AVAILABLE} | Not Supported | 0% Default |\n"
        f"{list_gpus(hostname)}"
    )


def option_value(args: list[str], name: str) -> str | None:
    """`--name=value` or `--name value`, as nvidia-smi accepts both."""
    for i, arg in enumerate(args):
        if arg.startswith(f"{name}="):
            return arg.split("=", 1)[1]
        if arg == name and i + 1 < len(args):
            return args[i + 1]
    return None


def render(args: list[str], hostname: str) -> tuple[str, int]:
    """What nvidia-smi prints for `args`, and its exit code."""
    if "-L" in args or "--list-gpus" in args:
        return list_gpus(hostname), 0
    query = option_value(args, "--query-gpu")
    if query is None:
        return summary(hostname), 0
    fields = [field.strip() for field in query.split(",") if field.strip()]
    format_options = set((option_value(args, "--format") or "").split(","))
    if "csv" not in format_options:
        return "Option --format is required with --query-gpu: use --format=csv\n", 2
    try:
        return query_csv(fields, format_options, hostname), 0
    except KeyError as missing:
        return f'Field "{missing.args[0]}" is not a valid field to query.\n', 2


def is_char_device(path: Path) -> bool:
    try:
        return stat.S_ISCHR(path.stat().st_mode)
    except OSError:
        return False


def driver_refusal(dev: Path) -> tuple[str, int] | None:
    """What nvidia-smi says before any query when the driver's device nodes are not here."""
    if not is_char_device(dev / "nvidiactl"):
        return NO_DRIVER
    if not is_char_device(dev / "nvidia0"):
        return NO_DEVICE
    return None


def main(argv: list[str] | None = None, dev: Path = DEV) -> int:
    args = sys.argv[1:] if argv is None else argv
    text, code = driver_refusal(dev) or render(args, socket.gethostname())
    (sys.stdout if code == 0 else sys.stderr).write(text)
    return code


if __name__ == "__main__":
    sys.exit(main())

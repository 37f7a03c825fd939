#!/usr/bin/env python3
"""A Prometheus exporter of `nvidia-smi`, with metric names compatible with
github.com/utkuozdemir/nvidia_gpu_exporter, for GB10 nodes and GPU servers alike.

Why not that exporter itself: the Go module proxy reachable here does not serve it (HTTP 403 on
the module's version list and on v1.3.2), and no other download site is reachable. This script
keeps its naming, so dashboards written for it work:

- `nvidia_smi_<query field, '.' -> '_'>` plus a unit suffix and scale taken from the field's
  unit: [W] -> `_watts`; [MHz] -> `_clock_hz` (x 1e6); [MiB] -> `_bytes` (x 1048576);
  [%] -> `_ratio` (x 0.01). E.g. `nvidia_smi_utilization_gpu_ratio`,
  `nvidia_smi_power_draw_watts`, `nvidia_smi_clocks_sm_clock_hz`, `nvidia_smi_temperature_gpu`;
- every sample labelled `uuid` (lower case, without the `GPU-` prefix);
- `nvidia_smi_gpu_info{uuid,name,driver_version} 1`, `nvidia_smi_command_exit_code`,
  `nvidia_smi_failed_scrapes_total`.

Each scrape runs `nvidia-smi --query-gpu=<FIELDS> --format=csv,noheader,nounits` once, with a
timeout. A field that reads `[N/A]` (or anything not a number) is left out, not exported as 0,
with one exception: on a unified-memory GPU (GB10) nvidia-smi has no memory fields, and the GPU's
memory is the system's, so `nvidia_smi_memory_{total,used,free}_bytes` come from --meminfo
(MemTotal, MemTotal - MemAvailable, MemAvailable). There is no fan metric: GB10 has no
tachometer, and a panel of a field that is always [N/A] only misleads.

Standard library only: it runs on the exporters image's python3, reading the node's nvidia-smi
bind-mounted read-only.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

PREFIX = "nvidia_smi"
# What is asked of nvidia-smi: every field a real one and the simulator's both answer. One
# unknown field fails the whole query, so the list is fixed, not configurable.
FIELDS = (
    "index",
    "uuid",
    "name",
    "driver_version",
    "pstate",
    "temperature.gpu",
    "power.draw",
    "utilization.gpu",
    "utilization.memory",
    "clocks.sm",
    "clocks.mem",
    "memory.total",
    "memory.used",
    "memory.free",
)
LABEL_FIELDS = ("uuid", "name", "driver_version")
# field -> (metric suffix, multiplier), from the unit nvidia-smi gives the field in its header.
UNITS: dict[str, tuple[str, float]] = {
    "power.draw": ("_watts", 1.0),
    "clocks.sm": ("_clock_hz", 1e6),
    "clocks.mem": ("_clock_hz", 1e6),
    "memory.total": ("_bytes", 1048576.0),
    "memory.used": ("_bytes", 1048576.0),
    "memory.free": ("_bytes", 1048576.0),
    "utilization.gpu": ("_ratio", 0.01),
    "utilization.memory": ("_ratio", 0.01),
}
MEMORY_FIELDS = ("memory.total", "memory.used", "memory.free")
DEFAULT_TIMEOUT_S = 5.0


def metric_name(field: str) -> str:
    suffix, _ = UNITS.get(field, ("", 1.0))
    return f"{PREFIX}_{field.replace('.', '_')}{suffix}"


def numeric(raw: str, multiplier: float) -> float | None:
    """A cell's value in base units, or None for [N/A], [Not Supported] and other text.
    pstate `P0` reads 0, as utkuozdemir's exporter reads it."""
    text = raw.strip()
    if text[:1] in ("P", "p") and text[1:].isdigit():
        text = text[1:]
    try:
        return float(text) * multiplier
    except ValueError:
        return None


# --- nvidia-smi and /proc/meminfo --------------------------------------------------------------


@dataclass(frozen=True)
class Gpu:
    labels: dict[str, str]
    values: dict[str, float]  # metric name -> value; fields that read [N/A] are absent


def query_command(nvidia_smi: str) -> list[str]:
    return [nvidia_smi, f"--query-gpu={','.join(FIELDS)}", "--format=csv,noheader,nounits"]


def parse_query(text: str) -> list[Gpu]:
    """`--format=csv,noheader,nounits` output, one row per GPU, cells in FIELDS order."""
    gpus = []
    for row in csv.reader(text.splitlines(), skipinitialspace=True):
        if not row:
            continue
        if len(row) != len(FIELDS):
            raise ValueError(f"nvidia-smi gave {len(row)} values for {len(FIELDS)} fields: {row}")
        cells = dict(zip(FIELDS, (cell.strip() for cell in row), strict=True))
        labels = {field: cells[field] for field in LABEL_FIELDS}
        labels["uuid"] = labels["uuid"].lower().removeprefix("gpu-")
        values = {}
        for field in FIELDS:
            if field in LABEL_FIELDS:
                continue
            value = numeric(cells[field], UNITS.get(field, ("", 1.0))[1])
            if value is not None:
                values[metric_name(field)] = value
        gpus.append(Gpu(labels, values))
    return gpus


def parse_meminfo(text: str) -> dict[str, int]:
    """/proc/meminfo -> field: bytes (the file counts kB, which are KiB)."""
    fields = {}
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            fields[name.strip()] = int(parts[0]) * (1024 if parts[1:] == ["kB"] else 1)
    return fields


def unified_memory(meminfo: dict[str, int]) -> dict[str, float]:
    """The GPU's memory on a unified-memory machine: the system's."""
    total, available = meminfo["MemTotal"], meminfo["MemAvailable"]
    return {
        metric_name("memory.total"): float(total),
        metric_name("memory.used"): float(total - available),
        metric_name("memory.free"): float(available),
    }


def with_unified_memory(gpus: list[Gpu], meminfo: dict[str, int] | None) -> list[Gpu]:
    """GPUs whose memory fields all read [N/A] take the system's memory, when it is known."""
    names = {metric_name(field) for field in MEMORY_FIELDS}
    if meminfo is None or "MemTotal" not in meminfo or "MemAvailable" not in meminfo:
        return gpus
    return [
        Gpu(gpu.labels, {**gpu.values, **unified_memory(meminfo)})
        if not names & gpu.values.keys()
        else gpu
        for gpu in gpus
    ]


# --- exposition --------------------------------------------------------------------------------


def escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def label_text(pairs: dict[str, str]) -> str:
    return "{" + ",".join(f'{name}="{escape(value)}"' for name, value in pairs.items()) + "}"


def value_text(value: float) -> str:
    return str(int(value)) if value.is_integer() else repr(value)


def render(gpus: list[Gpu], exit_code: int, failed_scrapes: int) -> str:
    lines = [
        f"# HELP {PREFIX}_command_exit_code Exit code of the last nvidia-smi call.",
        f"# TYPE {PREFIX}_command_exit_code gauge",
        f"{PREFIX}_command_exit_code {exit_code}",
        f"# HELP {PREFIX}_failed_scrapes_total Scrapes whose nvidia-smi call failed.",
        f"# TYPE {PREFIX}_failed_scrapes_total counter",
        f"{PREFIX}_failed_scrapes_total {failed_scrapes}",
    ]
    if gpus:
        lines += [
            f"# HELP {PREFIX}_gpu_info A metric with a constant '1' value labelled by GPU.",
            f"# TYPE {PREFIX}_gpu_info gauge",
        ]
        for gpu in gpus:
            lines.append(f"{PREFIX}_gpu_info{label_text(gpu.labels)} 1")
    names = sorted({name for gpu in gpus for name in gpu.values})
    for name in names:
        lines += [f"# HELP {name} nvidia-smi --query-gpu field.", f"# TYPE {name} gauge"]
        for gpu in gpus:
            if name in gpu.values:
                uuid = label_text({"uuid": gpu.labels["uuid"]})
                lines.append(f"{name}{uuid} {value_text(gpu.values[name])}")
    return "\n".join(lines) + "\n"


# --- the exporter ------------------------------------------------------------------------------

Runner = Callable[[list[str], float], "subprocess.CompletedProcess[str]"]


def run_command(args: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, check=False)


class Exporter:
    """One nvidia-smi call per scrape, one at a time (concurrent scrapes wait for the lock
    rather than pile up processes on the node)."""

    def __init__(
        self, nvidia_smi: str, meminfo: Path | None, timeout: float, runner: Runner = run_command
    ) -> None:
        self.command = query_command(nvidia_smi)
        self.meminfo = meminfo
        self.timeout = timeout
        self.runner = runner
        self.failed_scrapes = 0
        self.lock = threading.Lock()

    def scrape(self) -> str:
        with self.lock:
            gpus, exit_code = self.query()
            if exit_code != 0:
                self.failed_scrapes += 1
            return render(
                with_unified_memory(gpus, self.read_meminfo()), exit_code, self.failed_scrapes
            )

    def query(self) -> tuple[list[Gpu], int]:
        try:
            done = self.runner(self.command, self.timeout)
        except subprocess.TimeoutExpired:
            log(f"{self.command[0]} took longer than {self.timeout}s")
            return [], -1
        except OSError as error:
            log(f"{self.command[0]}: {error}")
            return [], -1
        if done.returncode != 0:
            log(f"{self.command[0]} exited {done.returncode}: {done.stderr.strip()[:300]}")
            return [], done.returncode
        try:
            return parse_query(done.stdout), 0
        except ValueError as error:
            log(str(error))
            return [], -1

    def read_meminfo(self) -> dict[str, int] | None:
        if self.meminfo is None:
            return None
        try:
            return parse_meminfo(self.meminfo.read_text())
        except OSError as error:
            log(f"{self.meminfo}: {error}")
            return None


def log(message: str) -> None:
    print(f"gpu_exporter: {message}", file=sys.stderr, flush=True)


def handler_for(exporter: Exporter) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?")[0] == "/metrics":
                self.reply(200, exporter.scrape(), "text/plain; version=0.0.4; charset=utf-8")
            elif self.path == "/":
                self.reply(200, '<a href="/metrics">metrics</a>\n', "text/html")
            else:
                self.reply(404, "not found\n", "text/plain")

        def reply(self, status: int, body: str, content_type: str) -> None:
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:
            pass  # one line per scrape would flood the journal

    return Handler


def listen_address(text: str) -> tuple[str, int]:
    """`:9835` or `host:9835`, as the Go exporters take it."""
    host, _, port = text.rpartition(":")
    if not port.isdigit():
        raise argparse.ArgumentTypeError(f"--listen-address {text!r}: want HOST:PORT or :PORT")
    return host.strip("[]"), int(port)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Prometheus exporter of nvidia-smi")
    parser.add_argument("--listen-address", type=listen_address, default=("", 9835))
    parser.add_argument("--nvidia-smi", default="nvidia-smi", help="the nvidia-smi to run")
    parser.add_argument(
        "--meminfo", type=Path, help="/proc/meminfo to read unified memory from (GB10)"
    )
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S)
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    exporter = Exporter(args.nvidia_smi, args.meminfo, args.timeout)
    server = ThreadingHTTPServer(args.listen_address, handler_for(exporter))
    log(f"serving /metrics on {args.listen_address[0] or '*'}:{args.listen_address[1]}")
    with contextlib.suppress(KeyboardInterrupt):
        server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

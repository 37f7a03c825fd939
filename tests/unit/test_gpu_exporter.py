"""The nvidia-smi exporter on golden output: the simulator's GB10 and an H200-like server.

GB10_QUERY is written by hand for the exporter's own query, no GB10 capture of that exact query
being public: cell by cell in the shape public GB10 captures show (memory sizes `[N/A]`,
utilization.memory 0: tests/unit/test_sim_nvidia_smi.py holds them), with the driver and power
of NVIDIA's dgx-spark-playbooks notebooks (580.95.05, 11 W at P0) and a made-up UUID. The clocks
are a guess: no public capture shows a GB10's, and clocks.mem `[N/A]` assumes no memory clock of
its own. The live test runs the simulator's nvidia-smi behind the HTTP server.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest

from roles.monitoring.files import gpu_exporter
from roles.monitoring.files.gpu_exporter import (
    Exporter,
    handler_for,
    listen_address,
    metric_name,
    parse_meminfo,
    parse_query,
    query_command,
    render,
    with_unified_memory,
)

from .support import gpu_device_nodes

pytestmark = pytest.mark.unit

GB10_QUERY = (
    "0, GPU-34e56935-af0f-55e7-84d3-7b855db78e99, NVIDIA GB10, 580.95.05, P0, 41, 11.52, 0, "
    "0, 2418, [N/A], [N/A], [N/A], [N/A]\n"
)
# Two GPUs of a discrete-memory server: memory is nvidia-smi's, never meminfo's.
H200_QUERY = (
    "0, GPU-AAAA0000-0000-0000-0000-000000000000, NVIDIA H200, 570.86.15, P0, 35, 120.50, 87, "
    "40, 1980, 3201, 143771, 1024, 142747\n"
    "1, GPU-BBBB0000-0000-0000-0000-000000000000, NVIDIA H200, 570.86.15, P8, 30, 75.10, 0, "
    "0, 345, 3201, 143771, 0, 143771\n"
)
MEMINFO = (
    "MemTotal:       125000000 kB\nMemFree:         1000000 kB\nMemAvailable:   100000000 kB\n"
)
SAMPLE = re.compile(r'^(\w+)\{uuid="([^"]*)"\} (\S+)$')


def values(text: str) -> dict[tuple[str, str], float]:
    """(metric, uuid) -> value of every per-GPU sample."""
    found = {}
    for line in text.splitlines():
        match = SAMPLE.match(line)
        if match:
            found[(match[1], match[2])] = float(match[3])
    return found


GB10 = "34e56935-af0f-55e7-84d3-7b855db78e99"


def test_query_asks_csv_without_header_or_units_and_no_fan() -> None:
    command = query_command("/usr/bin/nvidia-smi")
    assert command[0] == "/usr/bin/nvidia-smi"
    assert command[2] == "--format=csv,noheader,nounits"
    assert "fan.speed" not in command[1]


def test_names_follow_utkuozdemir() -> None:
    assert metric_name("utilization.gpu") == "nvidia_smi_utilization_gpu_ratio"
    assert metric_name("power.draw") == "nvidia_smi_power_draw_watts"
    assert metric_name("clocks.sm") == "nvidia_smi_clocks_sm_clock_hz"
    assert metric_name("temperature.gpu") == "nvidia_smi_temperature_gpu"
    assert metric_name("memory.used") == "nvidia_smi_memory_used_bytes"


def test_gb10_values_in_base_units_and_na_left_out() -> None:
    text = render(parse_query(GB10_QUERY), 0, 0)
    got = values(text)
    assert got[("nvidia_smi_power_draw_watts", GB10)] == 11.52
    assert got[("nvidia_smi_clocks_sm_clock_hz", GB10)] == 2418e6
    assert got[("nvidia_smi_utilization_gpu_ratio", GB10)] == 0
    assert got[("nvidia_smi_temperature_gpu", GB10)] == 41
    assert got[("nvidia_smi_pstate", GB10)] == 0
    assert got[("nvidia_smi_utilization_memory_ratio", GB10)] == 0
    for absent in ("clocks_mem_clock_hz", "memory_total_bytes"):
        assert f"nvidia_smi_{absent}" not in text  # [N/A]: omitted, never 0
    assert "fan" not in text


def test_gpu_info_labels() -> None:
    text = render(parse_query(GB10_QUERY), 0, 0)
    want = f'nvidia_smi_gpu_info{{uuid="{GB10}",name="NVIDIA GB10",driver_version="580.95.05"}} 1'
    assert want in text.splitlines()


def test_unified_memory_comes_from_meminfo() -> None:
    gpus = with_unified_memory(parse_query(GB10_QUERY), parse_meminfo(MEMINFO))
    got = values(render(gpus, 0, 0))
    assert got[("nvidia_smi_memory_total_bytes", GB10)] == 125_000_000 * 1024
    assert got[("nvidia_smi_memory_used_bytes", GB10)] == 25_000_000 * 1024
    assert got[("nvidia_smi_memory_free_bytes", GB10)] == 100_000_000 * 1024


def test_discrete_memory_stays_nvidia_smis() -> None:
    gpus = with_unified_memory(parse_query(H200_QUERY), parse_meminfo(MEMINFO))
    got = values(render(gpus, 0, 0))
    first, second = "aaaa0000-0000-0000-0000-000000000000", "bbbb0000-0000-0000-0000-000000000000"
    assert got[("nvidia_smi_memory_total_bytes", first)] == 143771 * 1048576
    assert got[("nvidia_smi_memory_used_bytes", first)] == 1024 * 1048576
    assert got[("nvidia_smi_utilization_gpu_ratio", first)] == 0.87
    assert got[("nvidia_smi_pstate", second)] == 8


def test_meminfo_without_available_leaves_memory_out() -> None:
    gpus = with_unified_memory(parse_query(GB10_QUERY), parse_meminfo("MemTotal: 10 kB\n"))
    assert "nvidia_smi_memory" not in render(gpus, 0, 0)


def test_a_short_row_is_refused() -> None:
    with pytest.raises(ValueError, match="for 14 fields"):
        parse_query("0, GPU-x, NVIDIA GB10\n")


def fake_run(stdout: str, returncode: int = 0) -> gpu_exporter.Runner:
    def run(args: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(args, returncode, stdout, "boom")

    return run


def test_failed_call_counts_and_exports_no_gpu() -> None:
    exporter = Exporter("nvidia-smi", None, 1.0, fake_run("", returncode=9))
    exporter.scrape()
    text = exporter.scrape()
    assert "nvidia_smi_command_exit_code 9" in text.splitlines()
    assert "nvidia_smi_failed_scrapes_total 2" in text.splitlines()
    assert "nvidia_smi_gpu_info" not in text


def test_timeout_is_a_failed_scrape() -> None:
    def slow(args: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
        raise subprocess.TimeoutExpired(args, timeout)

    text = Exporter("nvidia-smi", None, 0.1, slow).scrape()
    assert "nvidia_smi_command_exit_code -1" in text.splitlines()
    assert "nvidia_smi_failed_scrapes_total 1" in text.splitlines()


@pytest.mark.parametrize(
    ("text", "want"), [(":9835", ("", 9835)), ("127.0.0.1:1", ("127.0.0.1", 1))]
)
def test_listen_address(text: str, want: tuple[str, int]) -> None:
    assert listen_address(text) == want


def test_listen_address_refuses_no_port() -> None:
    with pytest.raises(Exception, match="HOST:PORT"):
        listen_address("localhost")


def test_promtool_accepts_the_exposition() -> None:
    promtool = shutil.which("promtool")
    assert promtool, "promtool is missing: install Debian's prometheus package"
    text = render(with_unified_memory(parse_query(H200_QUERY), None), 0, 0)
    linted = subprocess.run(
        [promtool, "check", "metrics"], input=text, capture_output=True, text=True, check=False
    )
    assert linted.returncode == 0, linted.stdout + linted.stderr


@pytest.fixture
def served(tmp_path: Path) -> Iterator[str]:
    """The exporter on a loopback port, running the simulator's nvidia-smi for real."""
    dev = gpu_device_nodes(tmp_path / "dev")
    run_main = "import sys, pathlib; from sparkrack.sim.nvidia_smi import main; " + (
        "sys.exit(main(sys.argv[2:], pathlib.Path(sys.argv[1])))"
    )
    fake = tmp_path / "nvidia-smi"
    fake.write_text(f'#!/bin/sh\nexec {sys.executable} -c "{run_main}" {dev} "$@"\n')
    fake.chmod(0o755)
    meminfo = tmp_path / "meminfo"
    meminfo.write_text(MEMINFO)
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler_for(Exporter(str(fake), meminfo, 10)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_serves_the_fake_gb10_over_http(served: str) -> None:
    with urllib.request.urlopen(f"{served}/metrics", timeout=10) as response:
        text = response.read().decode()
    assert "nvidia_smi_command_exit_code 0" in text.splitlines()
    names = {match[1] for match in map(SAMPLE.match, text.splitlines()) if match}
    assert {
        "nvidia_smi_utilization_gpu_ratio",
        "nvidia_smi_power_draw_watts",
        "nvidia_smi_temperature_gpu",
        "nvidia_smi_clocks_sm_clock_hz",
        "nvidia_smi_memory_total_bytes",
        "nvidia_smi_memory_used_bytes",
    } <= names
    assert 'name="NVIDIA GB10"' in text

"""perftest's `ib_write_bw` between the two ends of a cable half: the command lines for its server
and client, and the bandwidth its result table reports. Not a fact (a test is run, not read):
verification runs them as it runs the jumbo ping."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

# 1000 writes of 64 KiB: 66 MB, about 5 ms at a GB10 half's 100 Gb/s; enough to be a rate, short
# enough that every cable half of a sixteen-box rack is measured in seconds.
ITERATIONS, MESSAGE_BYTES = 1000, 65536
SERVER_WAIT_S = 30  # the server gives up when no client comes
CLIENT_TRIES, CLIENT_PAUSE_S = 10, 0.3  # the server may not listen yet when the client starts
# perftest's own port, for the first cable half; the n-th takes the n-th after it (verification
# runs its checks at once). Its server listens there for the seconds of its test, on every address.
FIRST_PORT = 18515


def write_bw_ports(cable_halves: int) -> range:
    """The ports verification's RDMA write servers may hold while it runs."""
    return range(FIRST_PORT, FIRST_PORT + cable_halves)


@dataclass(frozen=True)
class WriteBandwidth:
    gbits: float | None  # BW average[Gb/sec]; None when no result table was printed
    detail: str  # the last line perftest printed, to say why when there is no figure
    simulated: bool  # the simulator's stand-in printed it (sparkrack.sim.ib_write_bw)


def write_bw_args(device: str, gid_index: int, port: int) -> list[str]:
    return [
        "ib_write_bw", "-d", device, "-x", str(gid_index), "-p", str(port),
        "-n", str(ITERATIONS), "-s", str(MESSAGE_BYTES), "-F", "--report_gbits",
    ]  # fmt: skip


def server_command(device: str, gid_index: int, port: int) -> str:
    """The server, left running in the background for one client (or SERVER_WAIT_S)."""
    server = shlex.join(["timeout", str(SERVER_WAIT_S), *write_bw_args(device, gid_index, port)])
    return f"nohup {server} >/dev/null 2>&1 </dev/null &"


def client_command(device: str, gid_index: int, port: int, address: str) -> str:
    """The client, asked again while the server is not yet listening; its output whole."""
    client = shlex.join([*write_bw_args(device, gid_index, port), address])
    return (
        f"for try in $(seq {CLIENT_TRIES}); do out=$({client} 2>&1) && break; "
        f'sleep {CLIENT_PAUSE_S}; done; printf "%s\\n" "$out"'
    )


def parse_write_bw(stdout: str) -> WriteBandwidth:
    """The `BW average[Gb/sec]` column of the row under perftest's header."""
    lines = [line for line in stdout.splitlines() if line.strip()]
    simulated = any("SIMULATED" in line for line in lines)
    header = next((i for i, line in enumerate(lines) if "BW average[Gb/sec]" in line), None)
    if header is not None and header + 1 < len(lines):
        columns = re.split(r"\s{2,}", lines[header].strip())  # "BW peak[Gb/sec]": one column
        values = lines[header + 1].split()
        average = columns.index("BW average[Gb/sec]")
        if len(values) > average and re.fullmatch(r"[\d.]+", values[average]):
            return WriteBandwidth(float(values[average]), lines[header + 1].strip(), simulated)
    detail = next((line.strip() for line in reversed(lines) if "-" * 10 not in line), "")
    return WriteBandwidth(None, detail or "no output", simulated)

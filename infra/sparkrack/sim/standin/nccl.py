"""What NCCL would make of one rank's node: its RDMA ports (sysfs and the device nodes the
container was given), its memlock limit, its env, and the transport NCCL would pick and log.

Part of the engine stand-in (NOT NCCL): pure standard library, beside engine.py in the image.
"""

from __future__ import annotations

import fcntl
import os
import re
import resource
import socket
import struct
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

SYSFS_INFINIBAND = Path("/sys/class/infiniband")
DEV_INFINIBAND = Path("/dev/infiniband")
# What NCCL's IB transport needs locked to register its buffers. A real GB10 needs unlimited
# (FACTS: below it NCCL silently takes sockets); the simulator's machine can grant no more than
# the 8 MiB its hardware profile declares (catalog/hardware/gb10-sim.yaml, memlock_limit), so
# that is the bar here: a container given less (no --ulimit) falls back, as a real one would.
NCCL_MEMLOCK_NEED_BYTES = 8 * 1024 * 1024


# --- RDMA devices and the NCCL transport line -----------------------------------------------


@dataclass(frozen=True)
class RdmaPort:
    """One port of an RDMA device as sysfs shows it, and whether the process can open it."""

    device: str
    port: int
    active: bool
    link_layer: str  # "RoCE" or "IB", as NCCL prints it
    gid_type: str | None  # the GID type at NCCL_IB_GID_INDEX, e.g. "RoCE v2"
    verbs: bool = True  # its /dev/infiniband/uverbsN is in this container
    netdev: str | None = None  # the netdev whose address that GID carries (RoCE)

    @property
    def usable(self) -> bool:
        """What ibverbs can open and NCCL can address: up, its device node here, and a GID at
        the index NCCL was told (RoCE has no address without one)."""
        return self.active and self.verbs and (self.link_layer == "IB" or bool(self.gid_type))


def read_rdma_ports(root: Path, gid_index: int, dev_dir: Path = DEV_INFINIBAND) -> list[RdmaPort]:
    """Every port under `root` (/sys/class/infiniband), in the order NCCL would list them. The
    Nth device in that order opens as uverbsN (as the simulator and a single-HCA-type box
    number them)."""
    if not root.is_dir():
        return []
    ports = []
    devices = sorted(root.iterdir(), key=lambda path: pci_order(path.name))
    for index, device in enumerate(devices):
        verbs = (dev_dir / f"uverbs{index}").exists()
        for port_dir in sorted((device / "ports").glob("*"), key=lambda path: path.name):
            ports.append(read_port(device.name, port_dir, gid_index, verbs))
    return ports


def read_port(device: str, port_dir: Path, gid_index: int, verbs: bool) -> RdmaPort:
    link = read_text(port_dir / "link_layer") or "Ethernet"  # the sim's trees may omit it
    return RdmaPort(
        device=device,
        port=int(port_dir.name),
        active=(read_text(port_dir / "state") or "").endswith("ACTIVE"),
        link_layer="IB" if link == "InfiniBand" else "RoCE",
        gid_type=read_text(port_dir / "gid_attrs" / "types" / str(gid_index)) or None,
        verbs=verbs,
        netdev=read_text(port_dir / "gid_attrs" / "ndevs" / str(gid_index)) or None,
    )


def memlock_limit() -> float:
    """This process's soft RLIMIT_MEMLOCK in bytes (inf when unlimited)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    return float("inf") if soft == resource.RLIM_INFINITY else float(soft)


def read_text(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def pci_order(device: str) -> tuple[int, ...]:
    """Devices appear in PCI probe order; the predictable name (`rocep1s0f0`, `roceP2p1s0f0`)
    encodes the PCI address as domain, bus, slot, function. Unparsable names go last."""
    match = re.fullmatch(r"\w*?(?:P(\d+))?p(\d+)s(\d+)f(\d+)\w*", device)
    if match is None:
        return (sys.maxsize,)
    return tuple(int(number or 0) for number in match.groups())


def matches_nccl_list(spec: str | None, name: str, port: int | None = None) -> bool:
    """NCCL's list syntax for NCCL_IB_HCA and NCCL_SOCKET_IFNAME: comma-separated prefixes,
    `=` for exact names, `^` to exclude, and `:port` on HCAs."""
    if not spec:
        return True
    exclude = spec.startswith("^")
    entries = spec.lstrip("^")
    exact = entries.startswith("=")
    hit = any(entry_matches(entry, name, port, exact) for entry in entries.lstrip("=").split(","))
    return hit != exclude


def entry_matches(entry: str, name: str, port: int | None, exact: bool) -> bool:
    wanted, _, wanted_port = entry.partition(":")
    if wanted_port and port is not None and int(wanted_port) != port:
        return False
    return name == wanted if exact else name.startswith(wanted)


def oob_interfaces(env: Mapping[str, str], interfaces: Sequence[tuple[str, str]]) -> list[str]:
    """NCCL's socket interfaces as `name:ipv4<0>`: NCCL_SOCKET_IFNAME if set, else NCCL's own
    preference (not docker*, not lo, unless nothing else has an address)."""
    spec = env.get("NCCL_SOCKET_IFNAME")
    if spec:
        chosen = [(n, a) for n, a in interfaces if matches_nccl_list(spec, n)]
    else:
        chosen = [(n, a) for n, a in interfaces if not n.startswith(("docker", "lo"))]
        chosen = chosen or [(n, a) for n, a in interfaces if n.startswith("lo")]
    return [f"{name}:{address}<0>" for name, address in chosen]


@dataclass(frozen=True)
class Transport:
    """What NCCL would log on one node (`(level, text)` pairs); why NCCL fails outright
    (`refusal`), or why it took sockets on a node with RDMA hardware (`fallback`)."""

    lines: tuple[tuple[str, str], ...]
    refusal: str | None = None
    fallback: str | None = None
    ib_ports: tuple[RdmaPort, ...] = ()  # the ports NCCL's IB transport took, when it did


SOCKETS_COST = (
    "seed 001 measured it: NCCL_IB_DISABLE=1 sent every all-reduce over TCP and cost 58% "
    "of the throughput (25 against 40.4 tok/s), with erratic run-to-run variance"
)


def nccl_transport(
    env: Mapping[str, str],
    ports: Sequence[RdmaPort],
    interfaces: Sequence[tuple[str, str]],
    memlock: float = float("inf"),
) -> Transport:
    """The transport NCCL 2.2x picks for this env, these devices and this memlock limit, as its
    NCCL_DEBUG=INFO lines. Without usable RDMA it takes TCP sockets and says so only in those
    lines, as real NCCL does; vLLM serves on, slower. Relaxed ordering ([RO]) is assumed
    available, as on GB10."""
    sockets = oob_interfaces(env, interfaces)
    if not sockets:
        # NCCL's bootstrap fails outright: no address to listen on.
        refusal = f"NCCL_SOCKET_IFNAME={env.get('NCCL_SOCKET_IFNAME')} matches no interface"
        return Transport((("WARN", "Bootstrap : no socket interface found"),), refusal)
    socket_lines = (
        ("INFO", "NET/Socket : Using" + "".join(f" [{i}]{s}" for i, s in enumerate(sockets))),
        ("INFO", "Using network Socket"),
    )
    if env.get("NCCL_IB_DISABLE", "0").strip() not in ("", "0"):
        return Transport(socket_lines, fallback=ib_disabled_fallback(ports, sockets[0]))
    usable = usable_ports(env, ports)
    no_device = (("INFO", "NET/IB : No device found."), *socket_lines)
    if not usable:
        return Transport(no_device, fallback=no_device_fallback(env, ports))
    if memlock < NCCL_MEMLOCK_NEED_BYTES:
        # NCCL cannot register its buffers; what it prints then varies by version, the socket
        # lines that follow do not (they are what the collector and the checks read).
        return Transport(no_device, fallback=memlock_fallback(memlock))
    devices = "".join(f" [{i}]{p.device}:{p.port}/{p.link_layer}" for i, p in enumerate(usable))
    line = f"NET/IB : Using{devices} [RO]; OOB {sockets[0]}"
    return Transport((("INFO", line), ("INFO", "Using network IB")), ib_ports=tuple(usable))


def usable_ports(env: Mapping[str, str], ports: Sequence[RdmaPort]) -> list[RdmaPort]:
    """The ports NCCL_IB_HCA lets NCCL take, of those it can use, in NCCL's (PCI) order."""
    return [
        p for p in ports if p.usable and matches_nccl_list(env.get("NCCL_IB_HCA"), p.device, p.port)
    ]


def ib_disabled_fallback(ports: Sequence[RdmaPort], oob: str) -> str | None:
    if not ports:
        return None  # no RDMA hardware: sockets are all there is, nothing is lost
    devices = ", ".join(dict.fromkeys(p.device for p in ports))  # PCI order, once each
    return (
        f"NCCL_IB_DISABLE=1 on a node with RDMA devices ({devices}): TCP sockets on "
        f"{oob.split('<')[0]}; {SOCKETS_COST}"
    )


def no_device_fallback(env: Mapping[str, str], ports: Sequence[RdmaPort]) -> str | None:
    if not ports:
        return None
    present = ", ".join(f"{p.device}:{p.port} ({port_trouble(p)})" for p in ports)
    asked = env.get("NCCL_IB_HCA", "")
    return (
        f"no usable RDMA device (NCCL_IB_HCA={asked or '<unset>'}; present: {present}): "
        f"TCP sockets; {SOCKETS_COST}"
    )


def port_trouble(port: RdmaPort) -> str:
    if not port.verbs:
        return "no /dev/infiniband device node in this container"
    if not port.active:
        return "port down"
    return "no GID at NCCL_IB_GID_INDEX" if not port.usable else "usable"


def memlock_fallback(memlock: float) -> str:
    return (
        f"memlock limit {memlock:.0f} B below the {NCCL_MEMLOCK_NEED_BYTES} B NCCL needs to "
        f"register RDMA memory: TCP sockets; {SOCKETS_COST}"
    )


# NCCL prints nothing unless NCCL_DEBUG asks: WARN shows warnings, INFO the transport lines too.
NCCL_DEBUG_LEVELS = {"VERSION": 1, "WARN": 2, "INFO": 3, "ABORT": 4, "TRACE": 5}


def nccl_prefix(host: str, pid: int, tid: int, device: int) -> str:
    """NCCL's log prefix: `host:pid:tid [cudaDev]` (the local GPU index, 0 on a GB10)."""
    return f"{host}:{pid}:{tid} [{device}]"


def ray_prefix(pid: int, address: str) -> str:
    """What Ray puts before a line a rank's actor printed when it reaches the driver's log, as
    vLLM's ranks show there (`(RayWorkerWrapper pid=2981, ip=169.254.28.198) spark-3995:...`)."""
    return f"(RayWorkerWrapper pid={pid}, ip={address})"


# --- what each rank's node reports ----------------------------------------------------------


@dataclass(frozen=True)
class NodeReport:
    rank: int
    host: str
    address: str
    prefix: str  # Ray's forwarding prefix, then NCCL's own
    nccl_env: dict[str, str]
    ports: tuple[RdmaPort, ...]
    transport: Transport

    def log_lines(self) -> list[str]:
        """NCCL's lines as NCCL_DEBUG lets it print them, then the stand-in's own summary."""
        shown = NCCL_DEBUG_LEVELS.get(self.nccl_env.get("NCCL_DEBUG", "").upper(), 0)
        lines = [
            f"{self.prefix} NCCL {level} {text}"
            for level, text in self.transport.lines
            if NCCL_DEBUG_LEVELS[level] <= shown
        ]
        env = " ".join(f"{k}={v}" for k, v in sorted(self.nccl_env.items())) or "none"
        lines.append(f"stand-in: rank {self.rank} on {self.host} ({self.address}); NCCL env: {env}")
        if self.transport.fallback:
            lines.append(f"stand-in: rank {self.rank} on sockets: {self.transport.fallback}")
        for port in self.ports:
            gid = f"GID type {port.gid_type!r}" if port.gid_type else "no GID at that index"
            state = "ACTIVE" if port.active else "down"
            opens = "" if port.verbs else ", no device node here"
            lines.append(
                f"stand-in: rank {self.rank} sees {port.device}:{port.port} {state}, {gid}{opens}"
            )
        return lines


def inspect_node(
    rank: int,
    address: str,
    device: int,
    env: Mapping[str, str],
    sysfs: Path,
    interfaces: Sequence[tuple[str, str]],
    dev_dir: Path = DEV_INFINIBAND,
    memlock: float = float("inf"),
) -> NodeReport:
    nccl_env = {k: v for k, v in env.items() if k.startswith("NCCL_")}
    gid_index = int(nccl_env.get("NCCL_IB_GID_INDEX", "0"))
    ports = tuple(read_rdma_ports(sysfs, gid_index, dev_dir))
    host = socket.gethostname()
    return NodeReport(
        rank=rank,
        host=host,
        address=address,
        prefix=" ".join(
            (
                ray_prefix(os.getpid(), address),
                nccl_prefix(host, os.getpid(), threading.get_native_id(), device),
            )
        ),
        nccl_env=nccl_env,
        ports=ports,
        transport=nccl_transport(nccl_env, ports, interfaces, memlock),
    )


def ipv4_interfaces() -> list[tuple[str, str]]:
    """This node's interfaces with an IPv4 address, in kernel order (as getifaddrs lists them)."""
    found = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        for _, name in socket.if_nameindex():
            request = struct.pack("256s", name.encode()[:15])
            try:
                reply = fcntl.ioctl(probe.fileno(), 0x8915, request)  # SIOCGIFADDR
            except OSError:
                continue  # no IPv4 address
            found.append((name, socket.inet_ntoa(reply[20:24])))
    return found

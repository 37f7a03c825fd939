"""The fake RDMA sysfs tree, and the host-side loop that keeps its traffic counters live.

Each node gets /sys/class/infiniband/<dev>/ports/1/... (mounted read-only by the node image's
boot unit). The counters count 4-byte words, as the real `port_xmit_data`/`port_rcv_data` do, and
follow the bytes the matching veth really carried, so an RDMA dashboard shows real traffic.

The updater reads each node's /proc/<pid>/net/dev: the node's own network namespace, seen from
the host, whatever the topology. A node container that is recreated starts its veths at zero; the
counters stay monotonic by carrying the old total forward.

The port follows its netdev as an mlx5 port does: ACTIVE/LinkUp only while the netdev is up, and
the IPv4-mapped GIDs (indexes 2 and 3, NCCL_IB_GID_INDEX=3) only while it has an IPv4 address
(read as a route of its own in the node's table: the fabric role gives each port a subnet). A
fresh tree starts as a port whose fabric nobody configured: DOWN, link-local GIDs only.

Run as `python -m sparkrack.sim.rdma STATE_JSON`; `cluster.up` starts it and `down` stops it.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from sparkrack.sim.shell import run
from sparkrack.sim.topology import SimNode, rdma_device_for

# (state, phys_state) of a port whose netdev is up, and of one that is down.
PORT_UP = ("4: ACTIVE", "5: LinkUp")
PORT_DOWN = ("1: DOWN", "3: Disabled")
PORT_RATE = "200 Gb/sec (4X HDR)"
# GID table as on a RoCE port: link-local v1/v2, then IPv4-mapped v1/v2 (NCCL_IB_GID_INDEX=3).
LINK_LOCAL_GIDS = ("IB/RoCE v1", "RoCE v2")
IPV4_GIDS = ("IB/RoCE v1", "RoCE v2")
COUNTERS = ("port_xmit_data", "port_rcv_data", "port_xmit_packets", "port_rcv_packets")
INTERVAL_S = 1.0


def device_files(device: str, netdev: str) -> dict[str, str]:
    """Relative path -> content of one device's tree as at boot: its port down, its IPv4 GIDs
    absent, counters at 0."""
    files = {
        "node_type": "1: CA",
        "hca_type": "MT4129",
        "fw_ver": "28.45.1020",
        "ports/1/rate": PORT_RATE,
        "ports/1/link_layer": "Ethernet",
    }
    files |= port_state_files(up=False)
    files |= gid_files(netdev, LINK_LOCAL_GIDS, first=0)
    files.update({f"ports/1/counters/{name}": "0" for name in COUNTERS})
    return files


def port_state_files(up: bool) -> dict[str, str]:
    state, phys = PORT_UP if up else PORT_DOWN
    return {"ports/1/state": state, "ports/1/phys_state": phys}


def gid_files(netdev: str, kinds: tuple[str, ...], first: int) -> dict[str, str]:
    files = {}
    for index, kind in enumerate(kinds, start=first):
        files[f"ports/1/gid_attrs/types/{index}"] = kind
        files[f"ports/1/gid_attrs/ndevs/{index}"] = netdev
    return files


@dataclass(frozen=True)
class PortLink:
    """What an mlx5 port takes from its netdev: carrier and admin state, and an IPv4 address."""

    up: bool
    ipv4: bool


def follow_link(device_dir: Path, netdev: str, link: PortLink) -> None:
    """The port's state and IPv4 GIDs as its netdev has them now (unset IPv4 GIDs have no file:
    sysfs answers EINVAL there, which readers take as the same nothing)."""
    for relative, content in port_state_files(link.up).items():
        write_if_changed(device_dir / relative, content)
    ipv4 = gid_files(netdev, IPV4_GIDS, first=len(LINK_LOCAL_GIDS))
    for relative, content in ipv4.items():
        if link.ipv4:
            write_if_changed(device_dir / relative, content)
        else:
            (device_dir / relative).unlink(missing_ok=True)


def write_if_changed(path: Path, content: str) -> None:
    line = content + "\n"
    try:
        if path.read_text() == line:
            return
    except OSError:
        pass
    write_atomically(path, line)


def parse_routed_netdevs(route_table: str) -> set[str]:
    """/proc/net/route -> the interfaces with a route of their own (an address with its subnet)."""
    return {line.split()[0] for line in route_table.splitlines()[1:] if line.split()}


def read_links(pid: int, netdevs: list[str]) -> dict[str, PortLink]:
    """Each netdev's state in the node's namespace, read from the host through /proc/<pid>."""
    routed = parse_routed_netdevs(Path(f"/proc/{pid}/net/route").read_text())
    links = {}
    for netdev in netdevs:
        operstate = Path(f"/proc/{pid}/root/sys/class/net/{netdev}/operstate")
        try:
            up = operstate.read_text().strip() == "up"
        except OSError:  # no such netdev (yet): a port without a link
            up = False
        links[netdev] = PortLink(up=up, ipv4=up and netdev in routed)
    return links


def netdev_for(node: SimNode, device: str) -> str:
    for netdev in node.netdevs:
        if rdma_device_for(netdev) == device:
            return netdev
    raise KeyError(f"node {node.name}: no netdev for RDMA device {device}")


def write_tree(root: Path, node: SimNode) -> None:
    """The node's /sys/class/infiniband, under `root`; existing counters are left as they are."""
    for device in node.rdma_devices:
        for relative, content in device_files(device, netdev_for(node, device)).items():
            path = root / device / relative
            if relative.startswith("ports/1/counters/") and path.exists():
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content + "\n")


# --- counters -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ByteCounter:
    """A monotonic total over a raw counter that restarts at zero when its veth is recreated."""

    carried: int = 0  # total of earlier incarnations of the veth
    last_raw: int = 0

    def advance(self, raw: int) -> ByteCounter:
        if raw < self.last_raw:
            return ByteCounter(self.carried + self.last_raw, raw)
        return ByteCounter(self.carried, raw)

    @property
    def total(self) -> int:
        return self.carried + self.last_raw


def words(byte_count: int) -> int:
    """port_xmit_data/port_rcv_data count 4-byte words."""
    return byte_count // 4


def parse_net_dev(text: str) -> dict[str, tuple[int, int, int, int]]:
    """/proc/net/dev -> netdev: (rx_bytes, rx_packets, tx_bytes, tx_packets)."""
    stats = {}
    for line in text.splitlines()[2:]:
        name, _, numbers = line.partition(":")
        fields = [int(field) for field in numbers.split()]
        stats[name.strip()] = (fields[0], fields[1], fields[8], fields[9])
    return stats


def counter_values(
    rx_bytes: int, rx_packets: int, tx_bytes: int, tx_packets: int
) -> dict[str, int]:
    return {
        "port_xmit_data": words(tx_bytes),
        "port_rcv_data": words(rx_bytes),
        "port_xmit_packets": tx_packets,
        "port_rcv_packets": rx_packets,
    }


def write_atomically(path: Path, content: str) -> None:
    # Readers (node-exporter, checks) see the old value or the new one, never a torn write.
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(content)
    os.replace(partial, path)


# --- the updater loop -----------------------------------------------------------------------


@dataclass(frozen=True)
class UpdaterNode:
    container: str
    tree: Path
    devices: tuple[tuple[str, str], ...]  # (rdma device, netdev)


def updater_state(nodes: list[UpdaterNode]) -> str:
    return json.dumps(
        [
            {"container": n.container, "tree": str(n.tree), "devices": [list(d) for d in n.devices]}
            for n in nodes
        ]
    )


def load_state(path: Path) -> list[UpdaterNode]:
    return [
        UpdaterNode(
            container=entry["container"],
            tree=Path(entry["tree"]),
            devices=tuple((device, netdev) for device, netdev in entry["devices"]),
        )
        for entry in json.loads(path.read_text())
    ]


class Updater:
    def __init__(self, nodes: list[UpdaterNode]) -> None:
        self.nodes = nodes
        self.pids: dict[str, int] = {}
        self.counters: dict[tuple[str, str, int], ByteCounter] = {}

    def container_pid(self, container: str) -> int | None:
        pid = self.pids.get(container)
        if pid and Path(f"/proc/{pid}").exists():
            return pid
        done = run(["podman", "inspect", "-f", "{{.State.Pid}}", container], what="", check=False)
        pid = int(done.stdout.strip() or 0) if done.returncode == 0 else 0
        self.pids[container] = pid
        return pid or None

    def tick(self) -> None:
        for node in self.nodes:
            pid = self.container_pid(node.container)
            if pid is None:
                continue
            try:
                stats = parse_net_dev(Path(f"/proc/{pid}/net/dev").read_text())
                links = read_links(pid, [netdev for _, netdev in node.devices])
            except OSError:  # the node stopped between the lookup and the reads
                continue
            for device, netdev in node.devices:
                follow_link(node.tree / device, netdev, links[netdev])
                if netdev in stats:
                    self.update_device(node, device, stats[netdev])

    def update_device(self, node: UpdaterNode, device: str, raw: tuple[int, int, int, int]) -> None:
        totals = []
        for index, value in enumerate(raw):
            key = (node.container, device, index)
            self.counters[key] = self.counters.get(key, ByteCounter()).advance(value)
            totals.append(self.counters[key].total)
        counters_dir = node.tree / device / "ports/1/counters"
        for name, value in counter_values(*totals).items():
            write_if_changed(counters_dir / name, str(value))  # an idle port's stay as they are


def main(argv: list[str]) -> int:
    updater = Updater(load_state(Path(argv[0])))
    running = True

    def stop(_signum: int, _frame: FrameType | None) -> None:
        nonlocal running
        running = False

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    while running:
        updater.tick()
        time.sleep(INTERVAL_S)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

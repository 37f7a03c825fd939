"""The switch's DHCP server, for a stack whose fabric says `addressing: dhcp` (seed 000's rack).

A real rack's operator runs one on the switched fabric; the simulator runs Debian's dnsmasq in
the stack's fabric namespace, on the switch bridge. Each rail is its own /24 on the one bridge
(as the planner carves fabric.subnet), so the bridge holds the last host address of each, the
server's own, and every node port gets a fixed lease by its MAC: the n-th node is host n+1, what
static addressing would have given it. The nodes ask with busybox's udhcpc, as `up` sets them up.

The server outlives `sim up` (its PID in the stack's directory, like the RDMA counter updater);
`up` restarts it when its configuration changes (a node recreated has new MACs), `down` stops it.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from pathlib import Path

from sparkrack.sim import daemons, keys
from sparkrack.sim.fabric import BRIDGE, fabric_namespace, ip_in, links_in
from sparkrack.sim.shell import Progress, SimError, run
from sparkrack.sim.topology import SimLease, SimTopology

DNSMASQ = "/usr/sbin/dnsmasq"  # Debian's dnsmasq-base: the program without a system service
LEASE_TIME = "12h"


def server_files(stack: str) -> tuple[Path, Path, Path, Path]:
    """(configuration, pid file, lease file, log) of the stack's DHCP server."""
    root = keys.cluster_dir(stack)
    names = ("dnsmasq.conf", "dnsmasq.pid", "dnsmasq.leases", "dnsmasq.log")
    conf, pid, leases, log = (root / name for name in names)
    return conf, pid, leases, log


def leased_networks(leases: tuple[SimLease, ...]) -> list[ipaddress.IPv4Interface]:
    """Each rail's /24 with the server's own address in it (its last host), in order."""
    networks = sorted({ipaddress.IPv4Interface(lease.address).network for lease in leases})
    return [
        ipaddress.IPv4Interface(f"{net.broadcast_address - 1}/{net.prefixlen}") for net in networks
    ]


def server_config(stack: str, leases: tuple[SimLease, ...], macs: Mapping[SimLease, str]) -> str:
    _, pid_file, lease_file, log_file = server_files(stack)
    lines = [
        "# sparkrack sim: the switch's DHCP server; no DNS, no router, fixed leases only",
        "port=0",
        f"interface={BRIDGE}",
        "bind-interfaces",
        "dhcp-authoritative",
        "dhcp-option=option:router",
        f"pid-file={pid_file}",
        f"dhcp-leasefile={lease_file}",
        f"log-facility={log_file}",
        "log-dhcp",
    ]
    for server in leased_networks(leases):
        lines.append(
            f"dhcp-range={server.network.network_address},static,{server.netmask},{LEASE_TIME}"
        )
    for lease in leases:
        host = ipaddress.IPv4Interface(lease.address).ip
        lines += [f"# {lease.node}:{lease.netdev}", f"dhcp-host={macs[lease]},{host}"]
    return "\n".join(lines) + "\n"


def port_macs(leases: tuple[SimLease, ...], pids: Mapping[str, int]) -> dict[SimLease, str]:
    """Each leased port's MAC, as the node's veth end has it now."""
    links = {pid: links_in(pid) for pid in {pids[lease.node] for lease in leases}}
    macs = {}
    for lease in leases:
        link = links[pids[lease.node]].get(lease.netdev)
        if link is None:
            raise SimError(f"node {lease.node}: no port {lease.netdev} to lease an address to")
        macs[lease] = str(link["address"])
    return macs


def server_pid(stack: str) -> int | None:
    """The server's PID when it is alive and is ours (a recycled PID is not)."""
    conf, pid_file, _, _ = server_files(stack)
    return daemons.owned_pid(pid_file, DNSMASQ.encode(), f"--conf-file={conf}".encode())


def ensure_server(topology: SimTopology, pids: Mapping[str, int], progress: Progress) -> None:
    """The server running with the leases of the nodes as they are now; none without leases."""
    stack, leases = topology.stack, topology.switch.leases if topology.switch else ()
    if not leases:
        return
    namespace = fabric_namespace(stack)
    for server in leased_networks(leases):
        ip = ip_in(namespace)
        run(
            [*ip, "addr", "replace", str(server), "dev", BRIDGE], what=f"stack {stack}: DHCP server"
        )
    conf = server_files(stack)[0]
    config = server_config(stack, leases, port_macs(leases, pids))
    running = server_pid(stack)
    if running is not None and conf.exists() and conf.read_text() == config:
        return
    if not Path(DNSMASQ).exists():
        raise SimError(f"stack {stack}: its DHCP fabric needs {DNSMASQ} (Debian's dnsmasq-base)")
    stop_server(stack, progress)
    conf.write_text(config)
    command = ["ip", "netns", "exec", namespace, DNSMASQ, f"--conf-file={conf}"]
    run(command, what=f"stack {stack}: DHCP server (dnsmasq)")  # forks once listening
    progress(f"stack {stack}: DHCP server started on the switch, pid {server_pid(stack)}")


def stop_server(stack: str, progress: Progress) -> None:
    pid = server_pid(stack)
    if daemons.stop(server_files(stack)[1], pid):
        progress(f"stack {stack}: DHCP server stopped, pid {pid}")

"""Whether two ranks' RDMA ports reach each other through the fabric, as NCCL's queue pairs need.

Part of the engine stand-in (NOT NCCL): pure standard library, beside engine.py in the image.

A RoCE queue pair leaves by its own port and resolves the peer's GID (an IPv4 address) on that
port's link; nothing is routed. So an HCA that sits on another cable than the peer's gets no ARP
answer (the fabric role sets arp_ignore=1), and NCCL's `ibv_modify_qp` to RTR times out: NCCL
logs `Call to ibv_modify_qp failed with 110 Connection timed out, on dev ...` and the engine dies
("NCCL error: unhandled system error"). The stand-in tries the same path for real: a TCP connect
from each HCA's address, held to its netdev (SO_BINDTODEVICE), to the peer HCA's listener.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

PROBE_TIMEOUT_S = 3.0  # an ARP that nobody answers gives up after about 3 s on Linux


@dataclass(frozen=True)
class Hca:
    """One RDMA port NCCL would use and the address its RoCE v2 GID carries (its netdev's)."""

    device: str
    netdev: str
    address: str


@dataclass(frozen=True)
class Endpoint:
    """A peer HCA's listener, as the peer reports it."""

    device: str
    address: str
    port: int


def hcas_of(
    ports: Sequence[tuple[str, str | None]], interfaces: Sequence[tuple[str, str]]
) -> list[Hca]:
    """The (device, netdev) of each usable port whose netdev has an IPv4 address, in order."""
    addresses = dict(interfaces)
    return [
        Hca(device, netdev, addresses[netdev])
        for device, netdev in ports
        if netdev is not None and netdev in addresses
    ]


class Listeners:
    """A TCP listener on each HCA's address, for the peers' probes, every connection accepted and
    closed; closed once the probes are done (NCCL's queue pairs listen on nothing, and
    verification holds every node to the listeners the Plan names)."""

    def __init__(self, hcas: Sequence[Hca]) -> None:
        self.endpoints: list[Endpoint] = []
        self.servers: list[socket.socket] = []
        for hca in hcas:
            server = socket.create_server((hca.address, 0))
            self.servers.append(server)
            self.endpoints.append(Endpoint(hca.device, hca.address, server.getsockname()[1]))
            threading.Thread(target=accept_until_closed, args=(server,), daemon=True).start()

    def close(self) -> None:
        for server in self.servers:
            # shutdown first: a thread blocked in accept() holds the socket open past close().
            with contextlib.suppress(OSError):
                server.shutdown(socket.SHUT_RDWR)
            server.close()


def accept_until_closed(server: socket.socket) -> None:
    while True:
        try:
            connection, _ = server.accept()
        except OSError:  # closed
            return
        connection.close()


def probe(hca: Hca, peer: Endpoint, timeout_s: float = PROBE_TIMEOUT_S) -> str | None:
    """None when `hca` reaches `peer` through its own netdev; else the error, as errno and text."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, hca.netdev.encode())
        sock.bind((hca.address, 0))
        sock.settimeout(timeout_s)
        try:
            sock.connect((peer.address, peer.port))
        except TimeoutError:
            return "110 Connection timed out"
        except OSError as error:
            number = error.errno or 0
            return f"{number} {os.strerror(number)}"
    return None


def paired(
    local: Sequence[Hca], remote: Sequence[Endpoint], subnet_aware: bool
) -> Iterator[tuple[Hca, Endpoint]]:
    """The HCA pairs NCCL connects between two ranks. By list position (NCCL pairs the k-th
    device of one rank with the k-th of the other; ainode 0.5.11's fix note saw a wrong list
    die in ibv_modify_qp so), or, with NCCL_IB_SUBNET_AWARE_ROUTING, every pair: NCCL then
    takes the local device on the peer device's subnet."""
    if subnet_aware:
        yield from ((hca, peer) for hca in local for peer in remote)
    else:
        yield from zip(local, remote, strict=False)


@dataclass(frozen=True)
class Miss:
    """One HCA pair that did not connect, worded as NCCL's ibvwrap.cc warning."""

    hca: Hca
    peer: Endpoint
    error: str
    gid_index: str

    def nccl_line(self) -> str:
        return (
            f"Call to ibv_modify_qp failed with {self.error}, on dev {self.hca.device}:1, "
            f"curr state INIT, next state RTR, local GID index {self.gid_index}, "
            f"local GID ::ffff:{self.hca.address}, remote GID ::ffff:{self.peer.address}"
        )


def misses(local: Sequence[Hca], remote: Sequence[Endpoint], env: Mapping[str, str]) -> list[Miss]:
    """What fails between this rank and a peer: every pair NCCL would connect, or with subnet-
    aware routing, every pair when none connects."""
    subnet_aware = env.get("NCCL_IB_SUBNET_AWARE_ROUTING", "0") == "1"
    gid_index = env.get("NCCL_IB_GID_INDEX", "0")
    tried = [(hca, peer, probe(hca, peer)) for hca, peer in paired(local, remote, subnet_aware)]
    failed = [Miss(hca, peer, error, gid_index) for hca, peer, error in tried if error]
    if subnet_aware and len(failed) < len(tried):
        return []
    return failed


def rank_pairs(tensor_parallel: int, pipeline_parallel: int) -> list[tuple[int, int]]:
    """The ranks NCCL connects in vLLM's layout (rank = stage * TP + index): every pair inside a
    tensor-parallel group (ring and tree all-reduce), and each rank with its peer in the next
    pipeline stage (send/recv)."""
    pairs = []
    for stage in range(pipeline_parallel):
        group = [stage * tensor_parallel + index for index in range(tensor_parallel)]
        pairs += [(a, b) for i, a in enumerate(group) for b in group[i + 1 :]]
        if stage + 1 < pipeline_parallel:
            pairs += [(rank, rank + tensor_parallel) for rank in group]
    return pairs

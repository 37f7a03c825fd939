"""The stand-in's RDMA path test on a real kernel: two network namespaces joined by two crossed
veth "cables", each half on its own /24, arp_ignore=1 as the fabric role sets it. An HCA probed
from the other cable than its peer's must time out, as a RoCE queue pair's RTR does; one on the
same cable must connect. No rack: root and `ip` only.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparkrack.sim import standin

pytestmark = pytest.mark.e2e

STANDIN = Path(standin.__file__).parent
# Box a: a0 on cable 1, a1 on cable 2. Box b: b1 on cable 1, b0 on cable 2 (crossed, as gb10-2).
CABLES = {"1": ("a0", "b1"), "2": ("a1", "b0")}
ADDRESSES = {
    "a0": "198.19.201.1",
    "b1": "198.19.201.2",
    "a1": "198.19.202.1",
    "b0": "198.19.202.2",
}


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


@pytest.fixture
def crossed_boxes() -> Iterator[tuple[str, str]]:
    a, b = f"sr-reach-a-{os.getpid()}", f"sr-reach-b-{os.getpid()}"
    for ns in (a, b):
        ip("netns", "add", ns)
    try:
        for left, right in CABLES.values():
            ip("link", "add", left, "netns", a, "type", "veth", "peer", right, "netns", b)
        for ns, netdevs in ((a, ("a0", "a1")), (b, ("b0", "b1"))):
            ip("netns", "exec", ns, "sysctl", "-qw", "net.ipv4.conf.all.arp_ignore=1")
            ip("netns", "exec", ns, "sysctl", "-qw", "net.ipv4.conf.all.arp_announce=2")
            for netdev in netdevs:
                ip("-n", ns, "link", "set", netdev, "up")
                ip("-n", ns, "addr", "add", f"{ADDRESSES[netdev]}/24", "dev", netdev)
        yield a, b
    finally:
        for ns in (a, b):
            subprocess.run(["ip", "netns", "delete", ns], check=False, capture_output=True)


LISTEN = """
import json, sys, time
from reach import Hca, Listeners
hcas = [Hca(d, n, a) for d, n, a in json.loads(sys.argv[1])]
print(json.dumps([e.__dict__ for e in Listeners(hcas).endpoints]), flush=True)
time.sleep(60)
"""

PROBE = """
import json, sys
from reach import Endpoint, Hca, misses
hcas = [Hca(d, n, a) for d, n, a in json.loads(sys.argv[1])]
peers = [Endpoint(**e) for e in json.loads(sys.argv[2])]
print(json.dumps([m.nccl_line() for m in misses(hcas, peers, json.loads(sys.argv[3]))]))
"""


def hcas(*netdevs: str) -> str:
    return json.dumps([[f"roce-{n}", n, ADDRESSES[n]] for n in netdevs])


def in_ns(ns: str, script: str, *args: str) -> list[str]:
    return ["ip", "netns", "exec", ns, sys.executable, "-c", script, *args]


def probe(
    boxes: tuple[str, str], local: list[str], remote: list[str], env: dict[str, str]
) -> list[str]:
    a, b = boxes
    listener = subprocess.Popen(
        in_ns(b, LISTEN, hcas(*remote)), cwd=STANDIN, stdout=subprocess.PIPE, text=True
    )
    try:
        assert listener.stdout is not None
        endpoints = listener.stdout.readline()
        done = subprocess.run(
            in_ns(a, PROBE, hcas(*local), endpoints, json.dumps(env)),
            cwd=STANDIN,
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        )
        return list(json.loads(done.stdout))
    finally:
        listener.kill()
        listener.wait()


GID3 = {"NCCL_IB_GID_INDEX": "3"}


def test_hcas_on_one_cable_connect(crossed_boxes: tuple[str, str]) -> None:
    assert probe(crossed_boxes, ["a0", "a1"], ["b1", "b0"], GID3) == []


def test_hcas_on_different_cables_time_out_as_a_queue_pair_does(
    crossed_boxes: tuple[str, str],
) -> None:
    # The old planner's choice on crossed cables: port 0 on both boxes.
    lines = probe(crossed_boxes, ["a0"], ["b0"], GID3)

    assert lines == [
        "Call to ibv_modify_qp failed with 110 Connection timed out, on dev roce-a0:1, curr state "
        "INIT, next state RTR, local GID index 3, local GID ::ffff:198.19.201.1, remote GID "
        "::ffff:198.19.202.2"
    ]


def test_subnet_aware_routing_connects_a_ring_node_through_whichever_port_meets_the_peer(
    crossed_boxes: tuple[str, str],
) -> None:
    by_position = probe(crossed_boxes, ["a0", "a1"], ["b0", "b1"], GID3)
    subnet_aware = probe(
        crossed_boxes, ["a0", "a1"], ["b0", "b1"], GID3 | {"NCCL_IB_SUBNET_AWARE_ROUTING": "1"}
    )

    assert len(by_position) == 2  # a0 with b0, a1 with b1: each on another cable
    assert subnet_aware == []

"""The simulated two-node rack, checked from outside over real SSH (issue 4, acceptance).

Module order matters: the fresh-state checks run before anything configures a port, and the
kill-and-repair and down checks run last.
"""

from __future__ import annotations

import functools
import json
import subprocess

import pytest

from sparkrack.facts.gpu import DRIVER_VERSION_FILE, parse_cdi_spec, parse_driver_version
from sparkrack.sim import cluster, daemons, fabric, nodes
from sparkrack.sim.keys import cluster_dir, ssh_command, ssh_config_path
from sparkrack.sim.nvidia_smi import DRIVER_VERSION
from sparkrack.sim.topology import SimCable, SimTopology, rdma_device_for

from .sim_fixtures import SERVICE_USER, poll, sim2, ssh

CDI_SPEC = "/etc/cdi/nvidia.yaml"

pytestmark = pytest.mark.e2e
__all__ = ["sim2"]

TEST_NET = "169.254.{index}.{host}/30"  # link-local, per cable, removed after the check


def test_every_node_answers_over_pinned_ssh(sim2: SimTopology) -> None:
    for node in sim2.nodes:
        assert ssh(sim2.stack, node.name, "hostname") == node.name
        assert ssh(sim2.stack, node.name, "ip -4 -br addr show enP7s7").split()[2] == (
            f"{node.mgmt_address}/24"
        )


def test_the_cluster_key_opens_the_owners_login_only(sim2: SimTopology) -> None:
    """As on a real box: the service user does not exist before `up` makes it, and no other
    account than the owner's login takes the cluster's key."""
    stack, node = sim2.stack, sim2.nodes[0].name
    assert ssh(stack, node, f"getent passwd {SERVICE_USER} || true") == ""
    other = "sparkrack-probe"
    ssh(stack, node, f"id {other} >/dev/null 2>&1 || sudo useradd --create-home {other}")
    argv = ssh_command(stack, node, "true")
    as_other = [*argv[:3], "-l", other, *argv[3:]]
    refused = subprocess.run(as_other, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 255, refused.stderr
    assert "Permission denied" in refused.stderr, refused.stderr


def test_an_unpinned_host_key_is_refused(sim2: SimTopology) -> None:
    node = sim2.nodes[0]
    refused = subprocess.run(
        [
            "ssh",
            "-F",
            str(ssh_config_path(sim2.stack)),
            "-o",
            "UserKnownHostsFile=/dev/null",
            node.name,
            "true",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode == 255
    assert "Host key verification failed" in refused.stderr


def test_systemd_is_running_on_every_node(sim2: SimTopology) -> None:
    for node in sim2.nodes:
        state = poll(
            functools.partial(ssh, sim2.stack, node.name, "systemctl is-system-running", False),
            lambda value: value not in ("initializing", "starting"),
        )
        failed = ssh(sim2.stack, node.name, "systemctl --failed --no-legend --plain")
        assert state == "running", f"node {node.name}: {state}; failed units: {failed}"


def links(stack: str, node: str) -> dict[str, dict[str, object]]:
    return {link["ifname"]: link for link in json.loads(ssh(stack, node, "ip -j addr show"))}


def test_fabric_ports_start_fresh(sim2: SimTopology) -> None:
    for node in sim2.nodes:
        present = links(sim2.stack, node.name)
        for netdev in node.netdevs:
            assert netdev in present, f"node {node.name}: no {netdev}"
            link = present[netdev]
            assert "UP" not in link["flags"], f"node {node.name}: {netdev} is up"  # type: ignore[operator]
            assert link["mtu"] == 1500
            assert [a for a in link["addr_info"] if a["family"] == "inet"] == []  # type: ignore[attr-defined]


def configure_end(stack: str, node: str, netdev: str, address: str) -> None:
    # The fabric role's order: link up, MTU 9000, then the address.
    ssh(
        stack,
        node,
        f"sudo ip link set {netdev} up && sudo ip link set {netdev} mtu 9000 && "
        f"sudo ip addr add {address} dev {netdev}",
    )


def reset_end(stack: str, node: str, netdev: str) -> None:
    ssh(
        stack,
        node,
        f"sudo ip addr flush dev {netdev} && sudo ip link set {netdev} down && "
        f"sudo ip link set {netdev} mtu 1500",
    )


def mac_of(stack: str, node: str, netdev: str) -> str:
    return ssh(stack, node, f"cat /sys/class/net/{netdev}/address").upper()


def check_cable(stack: str, index: int, cable: SimCable) -> None:
    a_address = TEST_NET.format(index=index, host=1)
    b_address = TEST_NET.format(index=index, host=2)
    b_ip = b_address.split("/")[0]
    configure_end(stack, cable.a_node, cable.a_port_netdev, a_address)
    configure_end(stack, cable.b_node, cable.b_port_netdev, b_address)
    try:
        # Link level: an ARP reply on that very port, from the MAC of the port the map names.
        reply = ssh(stack, cable.a_node, f"arping -c 3 -w 5 -I {cable.a_port_netdev} {b_ip}")
        assert mac_of(stack, cable.b_node, cable.b_port_netdev) in reply.upper(), reply
        # The fabric role's own cable check: a jumbo frame with don't-fragment crosses it.
        ssh(stack, cable.a_node, f"ping -c 2 -W 3 -M do -s 8972 -I {cable.a_port_netdev} {b_ip}")
    finally:
        reset_end(stack, cable.a_node, cable.a_port_netdev)
        reset_end(stack, cable.b_node, cable.b_port_netdev)


def test_every_cable_joins_the_ports_the_map_names(sim2: SimTopology) -> None:
    assert len(sim2.cables) == 4
    for index, cable in enumerate(sim2.cables, start=10):
        check_cable(sim2.stack, index, cable)
    test_fabric_ports_start_fresh(sim2)  # and every port is back as it was


def test_a_port_reaches_no_node_but_its_cable_peer(sim2: SimTopology) -> None:
    # spark-1's f0 is cabled to spark-2's f1: an address on spark-2's f0 must not answer there.
    wrong = SimCable("spark-1", "enp1s0f0np0", "spark-2", "enp1s0f0np0")
    with pytest.raises(pytest.fail.Exception):
        check_cable(sim2.stack, 20, wrong)


def counter(stack: str, node: str, device: str, name: str) -> int:
    path = f"/sys/class/infiniband/{device}/ports/1/counters/{name}"
    return int(ssh(stack, node, f"cat {path}"))


def port_reading(stack: str, node: str, device: str) -> str:
    """The port's state and its GID 3 (NCCL_IB_GID_INDEX) as one line: 'state|gid 3 type'."""
    port = f"/sys/class/infiniband/{device}/ports/1"
    return ssh(stack, node, f'echo "$(cat {port}/state)|$(cat {port}/gid_attrs/types/3 2>&1)"')


def test_fake_rdma_port_follows_its_netdev_as_mlx5_does(sim2: SimTopology) -> None:
    """DOWN with no IPv4 GID while nobody configured the fabric; ACTIVE with its RoCE v2 GID
    once both ends of its cable are up (a carrier) and it has an address; back to DOWN when the
    far end goes down."""
    cable = sim2.cables[0]
    node, netdev = cable.a_node, cable.a_port_netdev
    device = rdma_device_for(netdev)
    fresh = port_reading(sim2.stack, node, device)
    assert fresh.startswith("1: DOWN|") and "RoCE v2" not in fresh, fresh
    configure_end(sim2.stack, cable.b_node, cable.b_port_netdev, TEST_NET.format(index=40, host=2))
    try:
        configure_end(sim2.stack, node, netdev, TEST_NET.format(index=40, host=1))
        want = "4: ACTIVE|RoCE v2"
        seen = poll(lambda: port_reading(sim2.stack, node, device), lambda r: r == want, 10)
        assert seen == want
        reset_end(sim2.stack, cable.b_node, cable.b_port_netdev)  # the carrier goes
        seen = poll(lambda: port_reading(sim2.stack, node, device), lambda r: "DOWN" in r, 10)
    finally:
        reset_end(sim2.stack, node, netdev)
        reset_end(sim2.stack, cable.b_node, cable.b_port_netdev)
    assert seen.startswith("1: DOWN|") and "RoCE v2" not in seen, seen


def test_fake_rdma_tree_reads_as_specified(sim2: SimTopology) -> None:
    node = sim2.nodes[0].name
    for device in sim2.nodes[0].rdma_devices:
        port = f"/sys/class/infiniband/{device}/ports/1"
        assert ssh(sim2.stack, node, f"cat {port}/rate") == "200 Gb/sec (4X HDR)"
        assert ssh(sim2.stack, node, f"cat {port}/gid_attrs/types/1") == "RoCE v2"
    refused = ssh(sim2.stack, node, "touch /sys/class/infiniband/x 2>&1 || true")
    assert "read-only file system" in refused.lower()
    devices = ssh(sim2.stack, node, "stat -c '%F %n' /dev/infiniband/*").splitlines()
    assert devices == [
        f"character special file /dev/infiniband/{name}"
        for name in ("rdma_cm", "uverbs0", "uverbs1", "uverbs2", "uverbs3")
    ]


def test_rdma_counters_follow_the_veth_in_four_byte_words(sim2: SimTopology) -> None:
    cable = sim2.cables[0]
    before = counter(sim2.stack, cable.a_node, "rocep1s0f0", "port_xmit_data")
    check_cable(sim2.stack, 30, cable)  # real traffic across enp1s0f0np0
    tx_bytes = int(
        ssh(
            sim2.stack,
            cable.a_node,
            f"cat /sys/class/net/{cable.a_port_netdev}/statistics/tx_bytes",
        )
    )
    words = poll(
        lambda: str(counter(sim2.stack, cable.a_node, "rocep1s0f0", "port_xmit_data")),
        lambda value: int(value) == tx_bytes // 4,
        timeout=10,
    )
    assert int(words) == tx_bytes // 4 > before


def test_nvidia_smi_reports_a_gb10(sim2: SimTopology) -> None:
    node = sim2.nodes[1].name
    query = "nvidia-smi --query-gpu=name,memory.total,memory.used,fan.speed --format=csv,noheader"
    assert ssh(sim2.stack, node, query) == "NVIDIA GB10, [N/A], [N/A], [N/A]"
    assert ssh(sim2.stack, node, "nvidia-smi -L").startswith("GPU 0: NVIDIA GB10 (UUID: GPU-")


TINY_IMAGE = (
    "set -e; rm -rf ~/tiny && mkdir -p ~/tiny/bin && cp /bin/busybox ~/tiny/bin/ && "
    "for tool in sh ip cat; do ln -s busybox ~/tiny/bin/$tool; done && "
    "tar -C ~/tiny -cf ~/tiny.tar . && "
    "podman import -q ~/tiny.tar localhost/sparkrack/tiny >/dev/null"
)


def test_the_login_runs_a_rootless_container_with_host_networking(sim2: SimTopology) -> None:
    """The owner's login, with the subordinate ids a distribution gives its first user, runs
    rootless Podman as the service user will once `up` has made it."""
    stack, node = sim2.stack, sim2.nodes[0].name
    # As the base role does for the service user: linger keeps its user manager up.
    ssh(stack, node, "sudo loginctl enable-linger $(id -un)")
    manager = poll(
        lambda: ssh(stack, node, "systemctl is-active user@$(id -u)", check=False),
        lambda value: value == "active",
        timeout=60,
    )
    assert manager == "active"
    ssh(stack, node, TINY_IMAGE)
    assert (
        ssh(
            stack,
            node,
            "podman info --format '{{.Host.Security.Rootless}} {{.Store.GraphDriverName}}'",
        )
        == "true overlay"
    )
    inside = ssh(
        stack,
        node,
        "podman run --rm --network host --device /dev/infiniband/uverbs0 "
        "localhost/sparkrack/tiny /bin/sh -c 'ip -o link; id -u'",
    )
    assert "enp1s0f0np0" in inside and "enP7s7" in inside  # the node's own interfaces
    assert inside.splitlines()[-1] == "0"  # root in the user namespace, not on the node


GPU_IN_CONTAINER = (
    "podman run --rm --network host {device} localhost/sparkrack/tiny /bin/sh -c "
    "'for f in /dev/nvidiactl /dev/nvidia0; do test -c $f && echo $f; done;"
    " test -f /usr/bin/nvidia-smi && echo nvidia-smi; true'"
)


def test_a_container_gets_the_gpu_only_by_the_cdi_spec_nvidia_ctk_generates(
    sim2: SimTopology,
) -> None:
    """As on a GB10: the nvidia module's version, a CDI spec that the product's reader takes as
    the loaded driver's, and the GPU's device nodes and nvidia-smi in a container given
    nvidia.com/gpu=all; nothing of the GPU in one given nothing. (After the rootless test: the
    tiny image is the service user's.)"""
    stack, node = sim2.stack, sim2.nodes[0].name
    loaded = parse_driver_version(ssh(stack, node, f"cat {DRIVER_VERSION_FILE}"))
    assert loaded == DRIVER_VERSION
    ssh(stack, node, f"sudo nvidia-ctk cdi generate --output={CDI_SPEC}")
    try:
        spec = parse_cdi_spec(ssh(stack, node, f"cat {CDI_SPEC}"))
        assert spec is not None and spec.driver == loaded
        assert "nvidia.com/gpu=all" in spec.devices and "nvidia.com/gpu=0" in spec.devices
        given = ssh(stack, node, GPU_IN_CONTAINER.format(device="--device nvidia.com/gpu=all"))
        assert given.split() == ["/dev/nvidiactl", "/dev/nvidia0", "nvidia-smi"]
        assert ssh(stack, node, GPU_IN_CONTAINER.format(device="")) == ""
    finally:
        ssh(stack, node, f"sudo rm -f {CDI_SPEC}")


def test_up_again_changes_nothing_and_keeps_configured_ports(sim2: SimTopology) -> None:
    ssh(
        sim2.stack,
        "spark-1",
        "sudo ip link set enp1s0f1np1 up && sudo ip link set enp1s0f1np1 mtu 9000",
    )
    try:
        lines: list[str] = []
        status = cluster.up(sim2, lines.append)
        assert status.healthy, status
        assert not [line for line in lines if "created" in line or "wired" in line], lines
        mtu = links(sim2.stack, "spark-1")["enp1s0f1np1"]["mtu"]
        assert mtu == 9000
    finally:
        reset_end(sim2.stack, "spark-1", "enp1s0f1np1")


def test_a_node_killed_from_outside_shows_in_status_and_up_restores_it(sim2: SimTopology) -> None:
    victim = nodes.container_name(sim2.stack, "spark-2")
    subprocess.run(["podman", "kill", victim], check=True, capture_output=True)
    broken = cluster.status(sim2)
    spark_2 = broken.nodes[1]
    assert spark_2.container in ("exited", "stopped"), spark_2
    assert (spark_2.ssh, broken.healthy) == (False, False)
    assert len(broken.missing_links) == 4  # every cable has an end in spark-2

    repaired = cluster.up(sim2, print)
    assert repaired.healthy, repaired
    check_cable(sim2.stack, 40, sim2.cables[1])


def test_a_removed_node_is_recreated(sim2: SimTopology) -> None:
    victim = nodes.container_name(sim2.stack, "spark-1")
    subprocess.run(["podman", "rm", "-f", "-t", "0", victim], check=True, capture_output=True)
    assert cluster.status(sim2).nodes[0].container == "missing"
    assert cluster.up(sim2, print).healthy
    assert ssh(sim2.stack, "spark-1", "hostname") == "spark-1"


def test_down_removes_everything_it_made_and_nothing_else(sim2: SimTopology) -> None:
    stack = sim2.stack
    # Look-alikes that are not the simulator's: one lacks the label, one the name prefix.
    decoys = [
        ["podman", "volume", "create", f"sparkrack-{stack}-decoy"],
        ["podman", "volume", "create", "--label", f"{nodes.STACK_LABEL}={stack}", "decoy-e2e"],
    ]
    for create in decoys:
        subprocess.run(create, check=True, capture_output=True)
    updater = cluster.counter_updater_pid(stack)
    assert updater is not None
    try:
        cluster.down(sim2, print)
        assert podman_names(["ps", "-a"], stack) == []
        assert podman_names(["network", "ls"], stack) == []
        assert podman_names(["volume", "ls"], stack) == [f"sparkrack-{stack}-decoy"]
        assert fabric.fabric_namespace(stack) not in fabric.named_namespaces()
        assert not cluster_dir(stack).exists()
        assert cluster.counter_updater_pid(stack) is None
        assert not daemons.process_alive(updater)
        assert subprocess.run(["podman", "volume", "exists", "decoy-e2e"]).returncode == 0
    finally:
        for name in (f"sparkrack-{stack}-decoy", "decoy-e2e"):
            subprocess.run(["podman", "volume", "rm", "-f", name], capture_output=True)


def podman_names(listing: list[str], stack: str) -> list[str]:
    field = "{{.Names}}" if listing[0] == "ps" else "{{.Name}}"
    done = subprocess.run(
        ["podman", *listing, "--format", field], check=True, capture_output=True, text=True
    )
    return sorted(name for name in done.stdout.split() if name.startswith(f"sparkrack-{stack}-"))

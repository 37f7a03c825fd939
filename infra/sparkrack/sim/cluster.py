"""The simulated cluster's lifecycle: up (idempotent, repairs), down (removes all it made), status.

`up` converges: a missing image is built, a missing or stopped node container is created or
started, missing veths are wired, the counter updater is (re)started. Nothing that exists and is
right is touched, so a node the roles have configured keeps its configuration.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from sparkrack.sim import daemons, dhcp, fabric, keys, nodes, rdma
from sparkrack.sim.images import ensure_rootfs_image
from sparkrack.sim.node_image import node_image_name, node_recipe
from sparkrack.sim.shell import Progress, SimError, run, timed_step
from sparkrack.sim.topology import NetworkStack, SimNode, SimTopology

BOOT_TIMEOUT_S = 300.0
POLL_INTERVAL_S = 1.0
SETTLED_STATES = ("running", "degraded")


@dataclass(frozen=True)
class NodeStatus:
    name: str
    mgmt_address: str
    container: str  # podman's state, or "missing"
    systemd: str  # `systemctl is-system-running`, or "-" when the container is not running
    ssh: bool

    @property
    def healthy(self) -> bool:
        return self.container == "running" and self.systemd == "running" and self.ssh


@dataclass(frozen=True)
class ClusterStatus:
    stack: str
    nodes: tuple[NodeStatus, ...]
    missing_links: tuple[str, ...]
    counter_updater_pid: int | None
    dhcp_server: str  # "none" (static fabric), "pid N", or "not running"

    @property
    def healthy(self) -> bool:
        nodes_ok = all(node.healthy for node in self.nodes)
        services_ok = self.counter_updater_pid is not None and self.dhcp_server != "not running"
        return nodes_ok and not self.missing_links and services_ok


def dhcp_server_state(topology: SimTopology) -> str:
    if topology.switch is None or not topology.switch.leases:
        return "none"
    pid = dhcp.server_pid(topology.stack)
    return f"pid {pid}" if pid is not None else "not running"


def up(topology: SimTopology, progress: Progress) -> ClusterStatus:
    stack = topology.stack
    fabric.fabric_plan(topology)  # refuse a bad cable map before making anything
    images = {
        kind: ensure_rootfs_image(node_image_name(kind), node_recipe(kind), progress)
        for kind in sorted({node.network_stack for node in topology.nodes})
    }
    keys.ensure_cluster_keys(topology)
    for node in topology.nodes:
        rdma.write_tree(nodes.rdma_tree(stack, node.name), node)
    if nodes.ensure_network(topology):
        progress(f"stack {stack}: management network {topology.mgmt_subnet} created")
    pids = ensure_nodes(topology, images, progress)
    with timed_step(progress, f"stack {stack}: fabric"):
        report_wiring(stack, fabric.ensure_fabric(topology, pids), progress)
        dhcp.ensure_server(topology, pids, progress)
    ensure_counter_updater(topology, progress)
    with timed_step(progress, f"stack {stack}: waiting for systemd and sshd on every node"):
        node_states = wait_until_ready(topology, progress)
    return ClusterStatus(
        stack=stack,
        nodes=node_states,
        missing_links=tuple(fabric.missing_links(topology, pids)),
        counter_updater_pid=counter_updater_pid(stack),
        dhcp_server=dhcp_server_state(topology),
    )


def ensure_nodes(
    topology: SimTopology, images: dict[NetworkStack, str], progress: Progress
) -> dict[str, int]:
    """Every node's container created or started; returns node name -> container PID."""
    stack = topology.stack
    missing = [
        n
        for n in topology.nodes
        if nodes.inspect_container(nodes.container_name(stack, n.name)) is None
    ]
    if missing and (shortfall := nodes.inotify_shortfall(len(missing))) is not None:
        raise SimError(f"stack {stack}: {shortfall}")
    with timed_step(progress, f"stack {stack}: {len(topology.nodes)} node containers"):
        for node in topology.nodes:
            outcome = nodes.ensure_node(stack, node, images[node.network_stack])
            if outcome != "running":
                progress(f"stack {stack}, node {node.name}: {outcome}")
    return {node.name: nodes.node_pid(stack, node.name) for node in topology.nodes}


def report_wiring(stack: str, wired: list[str], progress: Progress, listed: int = 8) -> None:
    """Name each link wired on a repair; on a fresh rack of dozens, just count them."""
    if len(wired) > listed:
        progress(f"stack {stack}: wired {len(wired)} links")
        return
    for line in wired:
        progress(f"stack {stack}: wired {line}")


def down(topology: SimTopology, progress: Progress) -> None:
    stack = topology.stack
    stop_counter_updater(stack, progress)
    dhcp.stop_server(stack, progress)
    with timed_step(progress, f"stack {stack}: remove node containers"):
        for name in nodes.remove_labelled(stack, "container"):
            progress(f"stack {stack}: removed container {name}")
    for kind in ("volume", "network"):
        for name in nodes.remove_labelled(stack, kind):
            progress(f"stack {stack}: removed {kind} {name}")
    if fabric.remove_fabric_namespace(stack):
        progress(f"stack {stack}: removed namespace {fabric.fabric_namespace(stack)}")
    if keys.cluster_dir(stack).exists():
        shutil.rmtree(keys.cluster_dir(stack))
        progress(f"stack {stack}: removed {keys.cluster_dir(stack)}")


def status(topology: SimTopology) -> ClusterStatus:
    stack = topology.stack
    containers, states = probe_nodes(topology)
    pids = {name: state.pid for name, state in containers.items() if state.status == "running"}
    return ClusterStatus(
        stack=stack,
        nodes=states,
        missing_links=tuple(fabric.missing_links(topology, pids)),
        counter_updater_pid=counter_updater_pid(stack),
        dhcp_server=dhcp_server_state(topology),
    )


def probe_nodes(
    topology: SimTopology,
) -> tuple[dict[str, nodes.ContainerState], tuple[NodeStatus, ...]]:
    """Every node's container state (one Podman call), then each node probed, in parallel."""
    containers = nodes.container_states(topology.stack)
    with ThreadPoolExecutor(max_workers=8) as pool:
        states = pool.map(lambda n: node_status(topology.stack, n, containers), topology.nodes)
        return containers, tuple(states)


def node_status(
    stack: str, node: SimNode, containers: dict[str, nodes.ContainerState]
) -> NodeStatus:
    state = containers.get(node.name)
    container = "missing" if state is None else state.status
    if container != "running":
        return NodeStatus(node.name, node.mgmt_address, container, "-", ssh=False)
    systemd, ssh = probe(stack, node.name)
    return NodeStatus(node.name, node.mgmt_address, container, systemd, ssh=ssh)


def probe(stack: str, node: str) -> tuple[str, bool]:
    """(systemd state, ssh answered): over SSH when it answers, else read with podman exec.

    A probe that times out is an answer too ("not yet"), never an error: a booting node on a
    loaded machine can hold an SSH session open while logind starts, and the caller's deadline,
    not one probe's, decides when waiting has failed.
    """
    if keys.ssh_config_path(stack).exists():
        command = keys.ssh_command(stack, node, "systemctl is-system-running")
        try:
            done = run(command, what="ssh", check=False, timeout=20)
        except SimError:  # with check=False, only a timeout raises
            done = None
        if done is not None and done.returncode != 255 and done.stdout.strip():
            return done.stdout.strip(), True  # 255 is ssh's own failure
    try:
        _, out = nodes.exec_in(stack, node, "systemctl is-system-running", timeout=15)
    except SimError:
        out = ""
    return out or "unknown", False


def wait_until_ready(topology: SimTopology, progress: Progress) -> tuple[NodeStatus, ...]:
    """Poll until every node's systemd has settled and its sshd answers, or name the laggards."""
    deadline = time.monotonic() + BOOT_TIMEOUT_S
    while True:
        _, states = probe_nodes(topology)
        waiting = [s.name for s in states if s.systemd not in SETTLED_STATES or not s.ssh]
        if not waiting:
            break
        if time.monotonic() > deadline:
            names = ", ".join(waiting)
            raise SimError(
                f"stack {topology.stack}: not ready after {BOOT_TIMEOUT_S:.0f}s: {names}"
            )
        time.sleep(POLL_INTERVAL_S)
    for state in states:
        if state.systemd == "degraded":
            failed = failed_units(topology.stack, state.name)
            progress(f"stack {topology.stack}, node {state.name}: degraded: {failed}")
    return states


def failed_units(stack: str, node: str) -> str:
    _, out = nodes.exec_in(stack, node, "systemctl --failed --no-legend --plain | cut -d' ' -f1")
    return ", ".join(out.split()) or "none listed"


# --- the RDMA counter updater ---------------------------------------------------------------


def updater_files(stack: str) -> tuple[Path, Path, Path]:
    """(state, pid file, log) of the stack's counter updater."""
    root = keys.cluster_dir(stack)
    return root / "rdma-updater.json", root / "rdma-updater.pid", root / "rdma-updater.log"


def counter_updater_pid(stack: str) -> int | None:
    """The updater's PID when it is alive and is ours (a recycled PID is not)."""
    state_file, pid_file, _ = updater_files(stack)
    return daemons.owned_pid(pid_file, b"sparkrack.sim.rdma", str(state_file).encode())


def ensure_counter_updater(topology: SimTopology, progress: Progress) -> None:
    stack = topology.stack
    state_file, pid_file, log_file = updater_files(stack)
    state = rdma.updater_state(
        [
            rdma.UpdaterNode(
                container=nodes.container_name(stack, node.name),
                tree=nodes.rdma_tree(stack, node.name),
                devices=tuple((dev, rdma.netdev_for(node, dev)) for dev in node.rdma_devices),
            )
            for node in topology.nodes
        ]
    )
    running = counter_updater_pid(stack)
    if running is not None and state_file.exists() and state_file.read_text() == state:
        return
    if running is not None:
        stop_counter_updater(stack, progress)
    state_file.write_text(state)
    with open(log_file, "a") as log:
        child = subprocess.Popen(
            [sys.executable, "-m", "sparkrack.sim.rdma", str(state_file)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,  # outlives `sim up`; `sim down` stops it by its PID
        )
    pid_file.write_text(f"{child.pid}\n")
    progress(f"stack {stack}: RDMA counter updater started, pid {child.pid}")


def stop_counter_updater(stack: str, progress: Progress) -> None:
    pid = counter_updater_pid(stack)
    if daemons.stop(updater_files(stack)[1], pid):
        progress(f"stack {stack}: RDMA counter updater stopped, pid {pid}")

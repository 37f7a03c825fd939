"""Node containers: privileged, systemd as PID 1, rootful Podman with runc, on the mgmt network.

Everything the simulator makes carries the name prefix `sparkrack-<stack>-` and the label
`sparkrack.sim.stack=<stack>`; `down` removes only what has both.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import os
import resource
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sparkrack.sim.keys import cluster_dir, node_ssh_dir
from sparkrack.sim.node_image import SIM_MOUNT_DIR, SSH_DIR
from sparkrack.sim.shell import SimError, failed, run, tail
from sparkrack.sim.topology import SimNode, SimTopology

STACK_LABEL = "sparkrack.sim.stack"
NODE_LABEL = "sparkrack.sim.node"
MGMT_INTERFACE = "enP7s7"  # the GB10's management NIC name
# systemd 257 refuses cgroup v1 unless forced; in a container it reads this from its own argv.
LEGACY_CGROUP_ARGS = ("SYSTEMD_CGROUP_ENABLE_LEGACY_FORCE=1", "systemd.unified_cgroup_hierarchy=0")
# Rootless Podman inside a node keeps its storage here: a volume, so on the host's filesystem,
# where native overlay works (overlay cannot stack on the node's own overlay root).
VOLUMES = {"home": "/home", "containers": "/var/lib/containers"}


def prefix(stack: str) -> str:
    return f"sparkrack-{stack}-"


def container_name(stack: str, node: str) -> str:
    return f"{prefix(stack)}{node}"


def network_name(stack: str) -> str:
    return f"{prefix(stack)}mgmt"


def volume_name(stack: str, node: str, purpose: str) -> str:
    return f"{prefix(stack)}{node}-{purpose}"


def rdma_tree(stack: str, node: str) -> Path:
    return cluster_dir(stack) / "nodes" / node / "infiniband"


def machine_id_path(stack: str, node: str) -> Path:
    return cluster_dir(stack) / "nodes" / node / "machine-id"


def machine_id(stack: str, node: str) -> str:
    """The node's own machine id, stable per stack and node. Every node shares the image's:
    udev derives each NIC's MAC from it and the name (MACAddressPolicy=persistent), so two
    nodes on one management bridge answered ARP with one MAC and SSH to one of them failed."""
    return hashlib.sha256(f"sparkrack-sim/{stack}/{node}".encode()).hexdigest()[:32]


def write_machine_id(stack: str, node: str) -> None:
    path = machine_id_path(stack, node)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(machine_id(stack, node) + "\n")


def ulimits() -> tuple[int, int]:
    """(nofile, nproc) at the current hard limits: Podman's defaults ask for more and fail.
    Podman also clamps its own nproc to kernel.pid_max, and runc cannot raise it back."""
    nofile = hard_limit(resource.RLIMIT_NOFILE, 1 << 20)
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    nproc = min(hard_limit(resource.RLIMIT_NPROC, pid_max), pid_max)
    return nofile, nproc


def hard_limit(which: int, ceiling: int) -> int:
    hard = resource.getrlimit(which)[1]
    return ceiling if hard == resource.RLIM_INFINITY else min(hard, ceiling)


def host_has_cgroup_v1() -> bool:
    return Path("/sys/fs/cgroup/cgroup.controllers").exists() is False


def node_init_command() -> list[str]:
    return ["/sbin/init", *(LEGACY_CGROUP_ARGS if host_has_cgroup_v1() else ())]


def run_args(stack: str, node: SimNode, image: str, limits: tuple[int, int]) -> list[str]:
    """`podman run` argv for one node container."""
    nofile, nproc = limits
    labels = [f"{STACK_LABEL}={stack}", f"{NODE_LABEL}={node.name}"]
    args = ["podman", "run", "--detach", "--name", container_name(stack, node.name)]
    args += ["--hostname", node.name, "--privileged", "--runtime", "runc"]
    args += ["--systemd", "always", "--cgroupns", "private"]
    args += ["--ulimit", f"nofile={nofile}:{nofile}", "--ulimit", f"nproc={nproc}:{nproc}"]
    attachment = f"ip={node.mgmt_address},interface_name={MGMT_INTERFACE}"
    args += ["--network", f"{network_name(stack)}:{attachment}"]
    # The base role owns /etc/hosts and resolv.conf, as on a real machine: Podman must not.
    args += ["--no-hosts", "--dns", "none"]
    for label in labels:
        args += ["--label", label]
    args += ["-v", f"{node_ssh_dir(stack, node.name)}:{SSH_DIR}:ro"]
    args += ["-v", f"{rdma_tree(stack, node.name)}:{SIM_MOUNT_DIR}/infiniband:ro"]
    args += ["-v", f"{machine_id_path(stack, node.name)}:/etc/machine-id:ro"]
    # Masked: it would write a mounted machine id into the image's file, and fails on ours.
    args += ["-v", "/dev/null:/etc/systemd/system/systemd-machine-id-commit.service:ro"]
    for purpose, target in VOLUMES.items():
        args += ["-v", f"{volume_name(stack, node.name, purpose)}:{target}"]
    return [*args, image, *node_init_command()]


@dataclass(frozen=True)
class ContainerState:
    name: str
    status: str  # podman's: running, exited, created, ... or "missing"
    pid: int
    image: str


def inspect_container(name: str) -> ContainerState | None:
    done = run(["podman", "inspect", "--format", "json", name], what=f"inspect {name}", check=False)
    if done.returncode != 0:
        return None
    data = json.loads(done.stdout)[0]
    return ContainerState(name, data["State"]["Status"], data["State"]["Pid"], data["ImageName"])


def container_states(stack: str) -> dict[str, ContainerState]:
    """node name -> its container's state, for the stack's labelled containers: one Podman call,
    where an inspect per node made `status` of sim-16 take seconds."""
    listing = ["podman", "ps", "--all", "--format", "json"]
    listing += ["--filter", f"label={STACK_LABEL}={stack}"]
    done = run(listing, what=f"stack {stack}: list node containers")
    states = {}
    for entry in json.loads(done.stdout or "[]"):
        name, node = entry["Names"][0], entry.get("Labels", {}).get(NODE_LABEL, "")
        if name == container_name(stack, node):
            states[node] = ContainerState(name, entry["State"], entry["Pid"], entry["Image"])
    return states


def ensure_network(topology: SimTopology) -> bool:
    """The management network; True when it had to be created."""
    name = network_name(topology.stack)
    if run(["podman", "network", "exists", name], what=name, check=False).returncode == 0:
        return False
    refuse_a_taken_subnet(topology)
    gateway = str(next(ipaddress.ip_network(topology.mgmt_subnet).hosts()))  # the host's side
    args = ["podman", "network", "create", "--subnet", topology.mgmt_subnet]
    # Internal: the nodes reach the host and each other, and nothing beyond.
    args += ["--gateway", gateway, "--internal", "--label", f"{STACK_LABEL}={topology.stack}"]
    run([*args, name], what=f"stack {topology.stack}: management network {topology.mgmt_subnet}")
    return True


def refuse_a_taken_subnet(topology: SimTopology) -> None:
    """Another rack on an overlapping management network is named, with how to free it (Podman
    would only say the subnet is in use)."""
    wanted = ipaddress.ip_network(topology.mgmt_subnet)
    listing = ["podman", "network", "ls", "--format", "json", "--filter", f"label={STACK_LABEL}"]
    for network in json.loads(run(listing, what="management networks").stdout or "[]"):
        other = network.get("labels", {}).get(STACK_LABEL, "")
        for subnet in (entry["subnet"] for entry in network.get("subnets") or []):
            if ipaddress.ip_network(subnet).overlaps(wanted):
                raise SimError(
                    f"stack {topology.stack}: management network {wanted} overlaps {subnet}"
                    f" of the running rack {other}: `sparkrack sim down {other}` first, or give"
                    f" {topology.stack}'s nodes addresses in another /24"
                )


def ensure_node(stack: str, node: SimNode, image: str) -> str:
    """Start, recreate or leave the node's container; says which."""
    name = container_name(stack, node.name)
    state = inspect_container(name)
    what = f"stack {stack}, node {node.name}"
    if state is not None and state.image != image:
        remove_container(name, what=f"{what}: remove old image")
        state = None
    if state is not None and state.status == "running" and not process_exists(state.pid):
        # Podman's record outlived the process (the machine was restored from a snapshot, or
        # the runtime lost it): nothing can exec in it, so it is made again on its volumes.
        remove_container(name, what=f"{what}: remove stale")
        state = None
    if state is None:
        ensure_volumes(stack, node.name)
        write_machine_id(stack, node.name)
        run(run_args(stack, node, image, ulimits()), what=f"{what}: create container")
        return "created"
    if state.status != "running":
        run(["podman", "start", name], what=f"{what}: start container")
        return "started"
    return "running"


def process_exists(pid: int) -> bool:
    return pid > 0 and Path(f"/proc/{pid}").exists()


def ensure_volumes(stack: str, node: str) -> None:
    """Labelled, so that `down` finds them (`podman run -v` would make unlabelled ones)."""
    for purpose in VOLUMES:
        name = volume_name(stack, node, purpose)
        if run(["podman", "volume", "exists", name], what=name, check=False).returncode != 0:
            args = ["podman", "volume", "create", "--label", f"{STACK_LABEL}={stack}", name]
            run(args, what=f"stack {stack}, node {node}: volume {name}")


# Each node's systemd (PID 1, journald, logind, udevd, the user manager) holds inotify instances
# counted against root's fs.inotify.max_user_instances (128 by default): measured, about six per
# node, so two sim-16 racks do not fit and a node then dies at boot without a log line.
INOTIFY_PER_NODE = 6
INOTIFY_LIMIT = Path("/proc/sys/fs/inotify/max_user_instances")


def inotify_instances_in_use(proc: Path = Path("/proc")) -> int:
    """inotify instances held by all processes this user can see (every one, as root)."""
    count = 0
    for fd_dir in proc.glob("[0-9]*/fd"):
        try:
            count += sum(1 for fd in fd_dir.iterdir() if os.readlink(fd) == "anon_inode:inotify")
        except OSError:  # a process that ended, or one we may not read
            continue
    return count


def inotify_shortfall(new_nodes: int) -> str | None:
    """Why `new_nodes` more nodes would not boot, or None when there is room."""
    limit = int(INOTIFY_LIMIT.read_text())
    free = limit - inotify_instances_in_use()
    if free >= new_nodes * INOTIFY_PER_NODE:
        return None
    return (
        f"{new_nodes} new nodes need about {new_nodes * INOTIFY_PER_NODE} inotify instances, "
        f"{free} of fs.inotify.max_user_instances={limit} are free (another rack running?): "
        f"`sparkrack sim down` one, or `sysctl -w fs.inotify.max_user_instances={limit * 8}`"
    )


def node_pid(stack: str, node: str) -> int:
    state = inspect_container(container_name(stack, node))
    if state is None or state.status != "running" or state.pid <= 0:
        raise SimError(f"stack {stack}, node {node}: container is not running")
    return state.pid


def exec_in(stack: str, node: str, command: str, timeout: float = 30) -> tuple[int, str]:
    """(exit status, stdout) of a command run in the node with `podman exec`."""
    name = container_name(stack, node)
    done = run(
        ["podman", "exec", name, "/bin/sh", "-c", command],
        what=f"stack {stack}, node {node}",
        check=False,
        timeout=timeout,
    )
    return done.returncode, done.stdout.strip()


LIST_COMMANDS = {
    "container": ["podman", "ps", "--all", "--format", "{{.Names}}"],
    "volume": ["podman", "volume", "ls", "--format", "{{.Name}}"],
    "network": ["podman", "network", "ls", "--format", "{{.Name}}"],
}


def remove_labelled(stack: str, kind: str) -> list[str]:
    """Remove the containers, volumes or networks with the stack's label and name prefix."""
    listing = [*LIST_COMMANDS[kind], "--filter", f"label={STACK_LABEL}={stack}"]
    names = run(listing, what=f"stack {stack}: list {kind}s").stdout.split()
    ours = [name for name in names if name.startswith(prefix(stack))]
    for name in ours:
        what = f"stack {stack}: remove {kind} {name}"
        if kind == "container":
            remove_container(name, what=what)
        else:
            run(["podman", kind, "rm", "--force", name], what=what)
    return ours


# Podman (4.3) waits 5 s after its SIGKILL for a container's processes to go, then fails with
# this and leaves the container "stopping". A node is a whole machine: under a loaded host its
# processes can take longer than that (CI: a stop, then the rack's removal, failed so), and a
# later ask succeeds once they are gone. Asked again while that is Podman's only complaint.
STILL_DYING = "did not die within timeout"
STOP_PATIENCE_S = 120.0


def stop_container(name: str, *, what: str) -> None:
    """The node's container stopped at once (no grace: a power cut), however long it takes."""
    until_dead(["podman", "stop", "--time", "0", name], what=what)


def remove_container(name: str, *, what: str) -> None:
    """The container stopped at once and removed; none by that name is fine."""
    until_dead(["podman", "rm", "--force", "--time", "0", name], what=what)


def until_dead(
    args: list[str],
    *,
    what: str,
    patience_s: float = STOP_PATIENCE_S,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """Run a stop or removal, again while Podman says only that the processes are still dying."""
    deadline = clock() + patience_s
    while True:
        done = run(args, what=what, check=False)
        if done.returncode == 0:
            return
        if STILL_DYING not in tail(done) or clock() >= deadline:
            raise failed(what, done)
        sleep(1.0)

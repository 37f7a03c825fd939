"""Per-cluster SSH material: the login key, each node's host key, known_hosts and ssh_config.

Host keys are generated here, mounted into the nodes, and written to the cluster's known_hosts
before any connection: SSH to a simulated node is always StrictHostKeyChecking=yes, so a node
that is not the one we made is refused, never auto-accepted.
"""

from __future__ import annotations

from pathlib import Path

from sparkrack.config.cache import cache_root
from sparkrack.sim.node_image import LOGIN_USER
from sparkrack.sim.shell import run
from sparkrack.sim.topology import SimNode, SimTopology
from sparkrack.transport.openssh import host_block


def cluster_dir(stack: str) -> Path:
    return cache_root() / "sim" / stack


def login_key(stack: str) -> Path:
    return cluster_dir(stack) / "id_ed25519"


def known_hosts_path(stack: str) -> Path:
    return cluster_dir(stack) / "known_hosts"


def ssh_config_path(stack: str) -> Path:
    return cluster_dir(stack) / "ssh_config"


def node_ssh_dir(stack: str, node: str) -> Path:
    """Mounted read-only at /etc/ssh/sparkrack-sim: host key and the authorized login key."""
    return cluster_dir(stack) / "nodes" / node / "ssh"


def ensure_keypair(path: Path, comment: str) -> None:
    if path.exists() and path.with_suffix(".pub").exists():
        return
    path.unlink(missing_ok=True)
    path.with_suffix(".pub").unlink(missing_ok=True)
    args = ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)]
    run(args, what=f"ssh-keygen {path}")


def ensure_cluster_keys(topology: SimTopology) -> None:
    """Keys, known_hosts and ssh_config for every node; existing keys are kept."""
    stack = topology.stack
    root = cluster_dir(stack)
    root.mkdir(parents=True, exist_ok=True)
    root.chmod(0o755)  # sshd's StrictModes walks the mounted path's parents
    ensure_keypair(login_key(stack), f"sparkrack-sim {stack}")
    authorized = login_key(stack).with_suffix(".pub").read_text()
    for node in topology.nodes:
        ssh_dir = node_ssh_dir(stack, node.name)
        ssh_dir.mkdir(parents=True, exist_ok=True)
        ssh_dir.chmod(0o755)
        ensure_keypair(ssh_dir / "ssh_host_ed25519_key", f"{node.name}.{stack}")
        (ssh_dir / "authorized_keys").write_text(authorized)
    known_hosts_path(stack).write_text(known_hosts(topology))
    ssh_config_path(stack).write_text(ssh_config(topology))


def host_public_key(stack: str, node: str) -> str:
    key_type, key = (node_ssh_dir(stack, node) / "ssh_host_ed25519_key.pub").read_text().split()[:2]
    return f"{key_type} {key}"


def known_hosts(topology: SimTopology) -> str:
    return "".join(
        f"{node.name},{node.mgmt_address} {host_public_key(topology.stack, node.name)}\n"
        for node in topology.nodes
    )


def ssh_config(topology: SimTopology) -> str:
    return "".join(ssh_config_entry(topology.stack, node) for node in topology.nodes)


def ssh_config_entry(stack: str, node: SimNode) -> str:
    return host_block(
        [node.name, node.mgmt_address],
        [
            ("HostName", node.mgmt_address),
            ("User", LOGIN_USER),
            ("IdentityFile", login_key(stack)),
            ("IdentitiesOnly", "yes"),
            ("UserKnownHostsFile", known_hosts_path(stack)),
            ("StrictHostKeyChecking", "yes"),
            ("BatchMode", "yes"),
            # Two racks deploying on two cores held a node's banner past 5 s (CI: "Connection
            # timed out during banner exchange"); a node that is gone still fails at once.
            ("ConnectTimeout", 20),
            ("LogLevel", "ERROR"),
        ],
    )


def ssh_command(stack: str, node: str, command: str) -> list[str]:
    """argv for running `command` on a node with the cluster's own, pinned, SSH settings."""
    return ["ssh", "-F", str(ssh_config_path(stack)), node, command]

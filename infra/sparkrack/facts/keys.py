"""SSH keys on a node: a user's key pair (read as that user) and the host keys sshd serves."""

from __future__ import annotations

import shlex

from sparkrack.facts import Fact

# How one node opens SSH to another (shipping images, copying weights): never a prompt, only
# pinned host keys, and the connect tried up to three times: connects over sim-16's loaded fabric
# have timed out (once in CI, once in a local run), and a connect that failed ran nothing, so it
# is safe to repeat.
NODE_TO_NODE_SSH = (
    "-o BatchMode=yes -o StrictHostKeyChecking=yes -o ConnectTimeout=10 -o ConnectionAttempts=3"
)


def by_node_name(node: str) -> str:
    """The ssh option that checks a peer's host key under its node name, not its address: a DHCP
    lease's address is not known when the head's known_hosts is written (base role)."""
    return f"-o HostKeyAlias={shlex.quote(node)}"


def key_file(key_name: str) -> str:
    """The key's path in the reading user's ~/.ssh (a shell word: $HOME expands there)."""
    return f'"$HOME"/.ssh/{shlex.quote(key_name)}'


def parse_public_key(stdout: str) -> str | None:
    """'ssh-ed25519 AAAA... comment', or None when the pair is not (wholly) there."""
    return stdout.strip() or None


def user_public_key(key_name: str) -> Fact[str | None]:
    """The public half of a key pair in ~/.ssh; read it with `.as_user(user)`. A public key
    without its private key is no key pair: it reads as absent."""
    key = key_file(key_name)
    return Fact(f"if [ -e {key} ] && [ -e {key}.pub ]; then cat {key}.pub; fi", parse_public_key)


def parse_host_keys(stdout: str) -> tuple[str, ...]:
    """'type base64' per host key, sorted, comments dropped."""
    keys = (" ".join(line.split()[:2]) for line in stdout.splitlines() if line.strip())
    return tuple(sorted(keys))


def host_keys() -> Fact[tuple[str, ...]]:
    """The public keys of the host keys sshd is configured to serve (`sshd -T`), as root."""
    command = (
        "sshd -T 2>/dev/null | awk '$1 == \"hostkey\" {print $2}' | "
        'while read -r key; do cat "$key.pub"; done'
    )
    return Fact(command, parse_host_keys, sudo=True)

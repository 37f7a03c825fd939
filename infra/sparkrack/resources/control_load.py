"""An image carried from the machine running Pulumi to a node: this machine's id for it, and its
`podman save` piped over OpenSSH into the node's `podman load` (ControlImage's provider)."""

from __future__ import annotations

import subprocess

from sparkrack.resources.image_ship import SHIP_TIMEOUT_S
from sparkrack.text.commands import as_user
from sparkrack.transport.target import SshError, Target


def local_image_id(reference: str) -> str:
    """The id this machine's Podman has under `reference`, or ''."""
    try:
        found = subprocess.run(
            ["podman", "image", "inspect", "--format", "{{.Id}}", reference],
            capture_output=True,
            text=True,
            check=False,
        )
    except FileNotFoundError:  # no Podman here: no image either
        return ""
    return found.stdout.strip() if found.returncode == 0 else ""


def ssh_args(target: Target) -> list[str]:
    """OpenSSH to the node as the program reaches it: its key, pinned host keys, no prompts."""
    return [
        "ssh", "-i", target.key_path, "-p", str(target.port),
        "-o", f"UserKnownHostsFile={target.known_hosts}", "-o", "StrictHostKeyChecking=yes",
        "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", f"{target.user}@{target.host}",
    ]  # fmt: skip


def load_from_control(target: Target, user: str, reference: str) -> None:
    """`podman save` here streamed into the node's `podman load` for `user`."""
    save = subprocess.Popen(["podman", "save", reference], stdout=subprocess.PIPE)
    try:
        load = subprocess.run(
            [*ssh_args(target), as_user(user, "podman load -q")],
            stdin=save.stdout,
            capture_output=True,
            text=True,
            timeout=SHIP_TIMEOUT_S,
            check=False,
        )
    finally:
        if save.stdout is not None:
            save.stdout.close()
        saved = save.wait()
    if saved != 0 or load.returncode != 0:
        detail = load.stderr.strip()[-300:] or f"podman save exited {saved}"
        raise SshError(f"{target.where()}: loading {reference} from this machine: {detail}")

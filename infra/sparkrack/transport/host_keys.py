"""Host keys outside a connection: what the stack's known_hosts pins for a node, the key the node
offers before anyone logs in, and pinning it (the `sparkrack hostkeys` command's work). The
transport itself (sparkrack.transport.ssh) only ever compares with what is pinned here."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import paramiko

from sparkrack.transport.ssh import CONNECT_TIMEOUT_S, fingerprint, known_hosts_name
from sparkrack.transport.target import HostKeyRefused, SshError, Target, Unreachable


def pinned_keys(target: Target) -> dict[str, paramiko.PKey]:
    """The node's keys in the stack's known_hosts, by type, in file order; none without a file."""
    try:
        keys = paramiko.HostKeys(target.known_hosts)
    except FileNotFoundError:
        return {}
    except OSError as error:
        message = f"cannot read known_hosts {target.known_hosts}: {error}"
        raise SshError(f"{target.where()}: {message}") from error
    found = keys.lookup(known_hosts_name(target))
    return {key_type: found[key_type] for key_type in found} if found is not None else {}


def offered_key(target: Target) -> paramiko.PKey:
    """The host key the node shows in the key exchange, trusted by nobody: no login, nothing run.
    Of the type our transport asks for (the first pinned key's, as paramiko's client does; else
    ssh-ed25519), so that it compares with the pinned one."""
    first = next(iter(pinned_keys(target)), "ssh-ed25519")
    first = "rsa-sha2-512" if first == "ssh-rsa" else first
    try:
        sock = socket.create_connection((target.host, target.port), timeout=CONNECT_TIMEOUT_S)
    except OSError as error:
        message = f"unreachable on port {target.port}: {error or type(error).__name__}"
        raise Unreachable(f"{target.where()}: {message}") from error
    transport = paramiko.Transport(sock)
    try:
        options = transport.get_security_options()
        if first in options.key_types:
            options.key_types = [first, *(t for t in options.key_types if t != first)]
        transport.start_client(timeout=CONNECT_TIMEOUT_S)
        return transport.get_remote_server_key()
    except (paramiko.SSHException, OSError, EOFError) as error:
        message = f"no SSH key exchange on port {target.port}: {error or type(error).__name__}"
        raise Unreachable(f"{target.where()}: {message}") from error
    finally:
        transport.close()


def pin(target: Target, key: paramiko.PKey) -> bool:
    """Add the node's key to the stack's known_hosts (new: file 0600, folder 0700); False if it is
    there already. A node with another key pinned is refused: that key is never replaced."""
    pinned = pinned_keys(target)
    if pinned.get(key.get_name()) == key:
        return False
    if pinned:
        shown = ", ".join(fingerprint(known) for known in pinned.values())
        message = f"{target.known_hosts} pins {shown}, not {fingerprint(key)}; left as it is"
        raise HostKeyRefused(f"{target.where()}: {message}")
    path = Path(target.known_hosts)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    ends_open = path.is_file() and path.read_bytes()[-1:] not in (b"", b"\n")
    line = f"{known_hosts_name(target)} {key.get_name()} {key.get_base64()}\n"
    with os.fdopen(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600), "a") as out:
        out.write(("\n" if ends_open else "") + line)
    return True

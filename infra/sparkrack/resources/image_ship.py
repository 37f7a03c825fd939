"""Shipping an image from one node's rootless Podman to another's: the source saves it once per
image id into an archive in the user's home, and streams it over SSH into the other's
`podman load`. Pure text; resources/podman.py's Image runs it on the source node."""

from __future__ import annotations

import re
import shlex

from sparkrack.facts.keys import NODE_TO_NODE_SSH, key_file

# How long an image may take to move (a build, a ship, a load from this machine): engine images
# are tens of GB.
SHIP_TIMEOUT_S = 1800
ARCHIVE_DIR = ".cache/sparkrack/images"  # relative to the user's home, where as_user runs


def archive_stem(reference: str) -> str:
    """Where the source node keeps an image's saved archives (in the user's home), by name."""
    return f"{ARCHIVE_DIR}/{re.sub(r'[^A-Za-z0-9._-]', '_', reference)}"


# Run as the user on the source node: the image saved once into an archive named by its id (under
# a lock: the other nodes' ships wait for it instead of saving it again, once per node, which on
# sixteen nodes was most of the head's work), older archives of the name dropped, a save that
# failed leaving nothing behind.
SAVE_ONCE = (
    'test -s "$1" && exit 0; rm -f -- "$1.part"; '
    'podman save -o "$1.part" "$2" || { rm -f -- "$1.part"; exit 1; }; '
    'for old in "$3"@*.tar; do [ "$old" = "$1" ] || rm -f -- "$old"; done; '
    'mv -- "$1.part" "$1"'
)


def ship_script(
    reference: str, image_id: str, key_name: str, user: str, address: str, *ssh_options: str
) -> str:
    """Run on the source node as the user: the image's archive streamed into the other node's
    Podman."""
    remote = shlex.quote(f"{user}@{address}")
    stem = archive_stem(reference)
    archive = f"{stem}@{image_id.removeprefix('sha256:')[:12]}.tar"
    save = shlex.join(["sh", "-c", SAVE_ONCE, "sh", archive, reference, stem])
    load = f"{remote} podman load -q < {shlex.quote(archive)}"
    return (
        f"mkdir -p {ARCHIVE_DIR} && flock {shlex.quote(stem + '.lock')} {save} && "
        f"ssh -i {key_file(key_name)} {' '.join([NODE_TO_NODE_SSH, *ssh_options])} {load}"
    )

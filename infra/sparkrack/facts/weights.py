"""A model directory as the weights resources read it: each file's size and sha256 (hashed on
the node, cached by size, mtime, ctime and inode), the checkpoint index's summary, and the model
repositories the Hugging Face cache holds (housekeeping). All are read as the service user with
`Fact.as_user`."""

from __future__ import annotations

import json
import posixpath
import shlex
from typing import Any

from sparkrack.facts import Fact
from sparkrack.text.checkpoint_index import INDEX_FILE, shard_contents

HASH_CACHE = ".cache/sparkrack/sha256"  # in the user's home
HASH_TIMEOUT_S = 6 * 3600  # a first read hashes a 1.5 TB checkpoint

# Run on the node as the user: argv = directory, cache directory. Prints {"files": {name:
# {"size", "sha256"}}} for the regular files (links followed) not starting with a dot, or null
# when the directory is not there.
MANIFEST_PY = r"""
import hashlib, json, os, sys
from concurrent.futures import ThreadPoolExecutor

def key(st):
    return f"{st.st_size} {st.st_mtime_ns} {st.st_ctime_ns} {st.st_ino}"

def sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()

def entry(name):
    path = os.path.join(directory, name)
    st = os.stat(path)
    side = os.path.join(cache, path.replace("/", "%"))
    try:
        with open(side) as f:
            digest, seen = f.read().strip().split(" ", 1)
        if seen == key(st):
            return name, {"size": st.st_size, "sha256": digest}
    except (OSError, ValueError):
        pass
    digest = sha256(path)
    with open(side + ".tmp", "w") as f:
        f.write(f"{digest} {key(st)}\n")
    os.replace(side + ".tmp", side)
    return name, {"size": st.st_size, "sha256": digest}

directory, cache = sys.argv[1], sys.argv[2]
if not os.path.isdir(directory):
    print("null")
    sys.exit()
os.makedirs(cache, exist_ok=True)
names = sorted(
    n for n in os.listdir(directory)
    if not n.startswith(".") and os.path.isfile(os.path.join(directory, n))
)
with ThreadPoolExecutor(4) as pool:
    print(json.dumps({"files": dict(pool.map(entry, names))}))
"""


def parse_manifest(stdout: str) -> dict[str, dict[str, Any]] | None:
    """name -> {size, sha256}, or None when the directory is not there."""
    found = json.loads(stdout)
    return None if found is None else dict(found["files"])


def manifest(directory: str) -> Fact[dict[str, dict[str, Any]] | None]:
    command = f'python3 - {shlex.quote(directory)} "$HOME"/{HASH_CACHE}'
    return Fact(command, parse_manifest, stdin=MANIFEST_PY, timeout_s=HASH_TIMEOUT_S)


def parse_checkpoint_contents(stdout: str) -> dict[str, Any]:
    """The index's summary (see checkpoint_index.shard_contents), {} without an index."""
    return shard_contents(json.loads(stdout)["weight_map"]) if stdout.strip() else {}


def checkpoint_contents(directory: str) -> Fact[dict[str, Any]]:
    path = shlex.quote(posixpath.join(directory, INDEX_FILE))
    return Fact(f"cat -- {path} 2>/dev/null || true", parse_checkpoint_contents)


HUB_REPO_PREFIX = "models--"  # the Hugging Face cache's directory per repository, under hub/


def parse_model_repos(stdout: str) -> dict[str, int]:
    """`du -sb` of each repository directory: its path -> bytes (links not followed)."""
    found = {}
    for line in stdout.splitlines():
        size, _, path = line.partition("\t")
        if path:
            found[path] = int(size)
    return found


def model_repos(model_dir: str) -> Fact[dict[str, int]]:
    """Every model repository in the cache under `model_dir`, {} when it holds none."""
    pattern = f"{shlex.quote(posixpath.join(model_dir, 'hub'))}/{HUB_REPO_PREFIX}*"
    return Fact(f"du -sb -- {pattern} 2>/dev/null || true", parse_model_repos)

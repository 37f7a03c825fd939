"""Checkpoint and ModelShards: the model's files on the head, and each node's share of them.

Checkpoint (the head) is the checkpoint as the head holds it: a directory the stack points at, or
one it downloads from a Hugging Face repo (HF_TOKEN goes to that one command on its stdin: never
in a command line, a file or plain state). Its outputs are the files' sizes and sha256 (the
manifest, computed on the head) and the index's summary (which layers each shard holds), from
which the role computes every node's set.

ModelShards (every node) is the node's set in its model directory: desired = those files with
their sizes and sha256; read = what the directory holds now, so a missing, altered or stray file
shows as drift on that node. Create/update copies what differs from the node's source (the plan's
shipping tree: the head, or an ancestor that holds it) over the fabric, into a temporary name,
checked against the sha256, then renamed: nothing half-written ever carries a shard's name. It
never deletes the weights on destroy (and the role retains it as well).

Copies between two workers need no trust among the workers: the head runs them with its own key
through an ssh-agent forwarded for that one command (`ssh -A worker 'cat shard | ssh peer ...'`),
and hands the worker its pinned known_hosts on stdin. The private key never leaves the head, and
the bytes go worker to worker.

Hashing 1.5 TB at every refresh would take many minutes: a file's sha256 is kept in the user's
~/.cache/sparkrack/sha256 with the size, mtime, ctime and inode it was computed for, and hashed
again only when one of those changed. An edit, a truncation, a `touch` back to the old mtime all
change the ctime; only a change that also resets the clock would go unseen.
"""

from __future__ import annotations

import posixpath
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import pulumi
from pulumi.dynamic import CheckFailure

from sparkrack.asking import gather
from sparkrack.facts.keys import NODE_TO_NODE_SSH, by_node_name, key_file
from sparkrack.facts.weights import HASH_CACHE, checkpoint_contents, manifest
from sparkrack.resources.base import (
    PULUMI_MODULE,
    Live,
    NodeProvider,
    NodeResource,
    Props,
    say,
)
from sparkrack.resources.files import TEMP_MARK
from sparkrack.resources.links import leased_address
from sparkrack.text.checkpoint_index import INDEX_FILE
from sparkrack.text.commands import as_user
from sparkrack.transport import ssh
from sparkrack.transport.target import SshError, Target

COPY_TIMEOUT_S = 6 * 3600  # one shard of a 1.5 TB checkpoint over a slow link

# The head's download, by huggingface_hub's snapshot_download, run as the user: argv = endpoint,
# repo, revision, directory; HF_TOKEN is the first line of stdin (empty: anonymous), never argv,
# env or a file. The revision is resolved to its commit first, and every file is fetched at that
# commit. The library writes each file to a temporary name under directory/.cache/huggingface
# and renames it when whole; a file already whole (its recorded etag, or its sha256) is not
# fetched again, and a connection cut mid-file resumes with a Range. Since huggingface_hub 1.18
# a file cut short by a killed run starts again from zero: the library deletes (or, killed,
# abandons) its partial file, which this script clears. Everything the library keeps stays in
# directory/.cache/huggingface (the manifest skips dot entries); no Hub setting of the node
# applies. The head fetches the whole checkpoint (it is the origin of the fan-out: every stage's
# shards leave from it), so the patterns are what vLLM loads, at the top of the repo: safetensors,
# configs, tokenizers, chat templates, remote code; not .bin/.pth copies of the weights.
DOWNLOAD_PY = r"""
import os, re, sys

endpoint, repo, revision, directory = sys.argv[1:5]
token = sys.stdin.readline().strip() or False
library = os.path.join(directory, ".cache", "huggingface")
for name in [n for n in os.environ if n.startswith(("HF_", "HUGGINGFACE_"))]:
    del os.environ[name]
os.environ.update(HF_HOME=library, HF_HUB_DISABLE_PROGRESS_BARS="1", HF_HUB_DISABLE_TELEMETRY="1")

from huggingface_hub import HfApi, snapshot_download
from huggingface_hub.errors import (EntryNotFoundError, GatedRepoError, HfHubHTTPError,
    LocalEntryNotFoundError, RepositoryNotFoundError, RevisionNotFoundError)
from huggingface_hub.utils import filter_repo_objects, logging

ALLOW = ["*.safetensors", "*.json", "*.txt", "*.model", "*.tiktoken", "*.jinja", "*.py"]
IGNORE = ["*/*", ".*"]
WHY = {401: "the token (sparkrack:hfToken) is missing or wrong",
       403: "the token may not read this repo (a gated model: accept its terms first)",
       404: "no such repo, revision or file"}

def why(error):
    if isinstance(error, GatedRepoError):
        return WHY[403]
    if isinstance(error, RevisionNotFoundError):
        return f"{repo} has no revision {revision}"
    if isinstance(error, RepositoryNotFoundError):
        return "no such repo, or a private one the token (sparkrack:hfToken) may not read"
    if isinstance(error, EntryNotFoundError):
        return "a file the revision lists is not there"
    return WHY.get(error.response.status_code, str(error).splitlines()[0])

def abandoned():
    root = os.path.join(library, "download")
    for where, _, names in os.walk(root):
        for name in names:
            if re.search(r"\.[0-9a-f]{8}\.incomplete$", name):
                yield os.path.join(where, name)

logging.set_verbosity_error()
try:
    info = HfApi(endpoint=endpoint, token=token).model_info(repo, revision=revision)
    names = [sibling.rfilename for sibling in info.siblings or []]
    wanted = list(filter_repo_objects(names, allow_patterns=ALLOW, ignore_patterns=IGNORE))
    for path in abandoned():
        os.remove(path)
    snapshot_download(repo, revision=info.sha, local_dir=directory, endpoint=endpoint,
                      token=token, allow_patterns=ALLOW, ignore_patterns=IGNORE)
except LocalEntryNotFoundError as error:
    sys.exit(f"{repo}@{revision}: {endpoint} did not answer: {error.__cause__ or error}")
except HfHubHTTPError as error:
    status, url = error.response.status_code, error.response.url
    sys.exit(f"{repo}@{revision}: HTTP {status} from {url}: {why(error)}")
except Exception as error:  # unreachable, refused, a full disk: one line, no traceback
    sys.exit(f"{repo}@{revision} from {endpoint}: {type(error).__name__}: {error}")
missing = [name for name in wanted if not os.path.isfile(os.path.join(directory, name))]
if missing:
    sys.exit(f"{repo}@{revision}: the download left out {', '.join(missing)}")
print("\n".join(wanted))
"""

# The download's Python: the system's python3 where it has huggingface_hub in these versions (a
# distribution's package: Debian forky, Ubuntu 25.10 and later, the simulated nodes' image),
# else a venv of the user's with PyPI's (Ubuntu 24.04 / DGX OS 7 and Debian 13 package none),
# made once; `python3 -m venv` needs the python3-venv package (the base role's).
HUB_VENV = ".local/share/sparkrack/hf-hub"
HUB_VERSIONS = ">=1.23,<3"  # the snapshot_download DOWNLOAD_PY is tested against
HAS_HUB_PY = (
    "import sys, huggingface_hub; from packaging.specifiers import SpecifierSet; "
    f"sys.exit(not SpecifierSet({HUB_VERSIONS!r}).contains(huggingface_hub.__version__, True))"
)


# The same key as facts.weights.MANIFEST_PY's, for the receiver's record: nanoseconds, so that
# a change in the same second as the copy still counts.
STAT_KEY_PY = (
    "import os, sys; st = os.stat(sys.argv[1]); "
    'print(f"{st.st_size} {st.st_mtime_ns} {st.st_ctime_ns} {st.st_ino}")'
)


def record_hash(path: str, sha256: str) -> list[str]:
    """sh lines: the file's sha256 recorded under its stat key, for the next read (the key
    facts.weights.MANIFEST_PY computes)."""
    cache = f'"$HOME"/{HASH_CACHE}'
    record = f"$(printf %s {shlex.quote(path)} | sed 's|/|%|g')"
    return [
        f"key=$(python3 -c {shlex.quote(STAT_KEY_PY)} {shlex.quote(path)})",
        f'echo {shlex.quote(sha256)} "$key" > {cache}/"{record}"',
    ]


def receive_script(directory: str, name: str, sha256: str, link_from: str = "") -> str:
    """sh on the receiving node, as the user: stdin installed as directory/name, all or nothing,
    and its sha256 recorded for the next read. With `link_from` (a file on the same node), a
    hard link to it instead: one copy of the bytes; a second link changes the inode's ctime, so
    the source's record is written again too (else its next read would hash it afresh). It
    fails where no link can be made (another filesystem, another owner's file)."""
    path = posixpath.join(directory, name)
    prefix = posixpath.join(directory, f".{name}{TEMP_MARK}")
    fill = f'ln -f -- {shlex.quote(link_from)} "$tmp"' if link_from else 'cat > "$tmp"'
    return "; ".join(
        [
            "set -eu",
            f'mkdir -p -- {shlex.quote(directory)} "$HOME"/{HASH_CACHE}',
            f"rm -f -- {shlex.quote(prefix)}*",  # what a killed copy of this file left
            f"tmp=$(mktemp {shlex.quote(prefix + 'XXXXXX')})",
            "trap 'rm -f -- \"$tmp\"' EXIT",
            "trap 'exit 1' HUP INT TERM",
            fill,
            f'echo {shlex.quote(sha256)}"  $tmp" | sha256sum --check --status -',
            f'mv -f -- "$tmp" {shlex.quote(path)}',
            *record_hash(path, sha256),
            *(record_hash(link_from, sha256) if link_from else []),
        ]
    )


KNOWN_FROM_HEAD = '-o UserKnownHostsFile="$kh"'  # the head's pinned keys, handed over
# Where the shell has it. Not `set -o pipefail || true`: a dash without the option (before 0.5.13)
# exits on a special builtin's error, `||` or not; tried in a subshell, only the subshell does.
# Without it the receiver's sha256 check still refuses a short copy.
PIPEFAIL = "if (set -o pipefail) 2>/dev/null; then set -o pipefail; fi"


def ssh_to(address: str, user: str, *options: str) -> str:
    return f"ssh {NODE_TO_NODE_SSH} {' '.join(options)} {shlex.quote(f'{user}@{address}')}"


def copy_script(
    props: Props, name: str, source: str, destination_is_head: bool, head_key: str
) -> str:
    """sh on the head, as the user: one file from `source` into this node's directory.

    From the head: `cat | ssh node`. From another node: the head's agent forwarded to it, and its
    known_hosts handed over on stdin, so that node can reach this one with the head's key."""
    user, route = str(props["user"]), props["routes"][source]
    src = shlex.quote(posixpath.join(str(route["directory"]), name))
    receive = receive_script(str(props["directory"]), name, props["files"][name]["sha256"])
    if source == props["origin"] and destination_is_head:
        # The head's share is a link to its checkpoint where it can be (one copy: a download
        # is the service user's, on the model dir's filesystem), else a copy.
        path, sha256 = posixpath.join(str(route["directory"]), name), props["files"][name]["sha256"]
        link = receive_script(str(props["directory"]), name, sha256, link_from=path)
        copy = f"{PIPEFAIL}; cat -- {src} | sh -c {shlex.quote(receive)}"
        return f"sh -c {shlex.quote(link)} 2>/dev/null || {{ {copy}; }}"
    remote = shlex.quote(f"sh -c {shlex.quote(receive)}")
    key = f"-i {key_file(head_key)}"
    # A lease's host key is pinned under the node's name (keys.by_node_name).
    alias = [by_node_name(str(route["to_alias"]))] if route.get("to_alias") else []
    if source == props["origin"]:
        return f"{PIPEFAIL}; cat -- {src} | {ssh_to(str(route['to']), user, key, *alias)} {remote}"
    to_peer = ssh_to(str(route["to"]), user, KNOWN_FROM_HEAD, *alias)
    hop = (
        f'kh=$(mktemp); trap \'rm -f -- "$kh"\' EXIT; cat > "$kh"; {PIPEFAIL}; '
        f"cat -- {src} | {to_peer} {remote}"
    )
    agent = (
        "eval \"$(ssh-agent -s)\" >/dev/null; trap 'ssh-agent -k >/dev/null' EXIT; "
        f"ssh-add -q {key_file(head_key)} 2>/dev/null"
    )
    forward = ssh_to(str(route["address"]), user, "-A", key)
    return f'{agent}; {forward} {shlex.quote(hop)} < "$HOME"/.ssh/known_hosts'


# --- Checkpoint -------------------------------------------------------------------------------


def missing_shards(files: dict[str, Any], contents: dict[str, Any]) -> list[str]:
    """What the checkpoint lacks: its index, or a shard the index names."""
    if INDEX_FILE not in files:
        return [INDEX_FILE]
    return sorted(set(contents) - set(files))


def download_command(user: str, download: Props, directory: str) -> str:
    """The download, as the user on the head, by a Python with huggingface_hub (see HUB_VENV);
    the token is not in it: it goes on stdin, which only the download reads."""
    has_hub = f"-c {shlex.quote(HAS_HUB_PY)} </dev/null 2>/dev/null"
    venv, requirement = f'"$HOME"/{HUB_VENV}', shlex.quote(f"huggingface_hub{HUB_VERSIONS}")
    pip = f'"$py" -m pip install -q --disable-pip-version-check --no-input {requirement}'
    args = [download["endpoint"], download["repo"], download["revision"], directory]
    script = "; ".join(
        [
            "set -e",
            "py=python3",
            f'if ! "$py" {has_hub}; then py={venv}/bin/python',
            f'[ -x "$py" ] || python3 -m venv {venv} </dev/null >&2',
            f'"$py" {has_hub} || {pip} </dev/null >&2; fi',
            f'exec "$py" -c {shlex.quote(DOWNLOAD_PY)} {shlex.join(args)}',
        ]
    )
    return as_user(user, script)


class CheckpointProvider(NodeProvider):
    INPUTS: ClassVar[tuple[str, ...]] = ("user", "directory", "download", "token", "complete")
    STATE: ClassVar[tuple[str, ...]] = ("complete",)
    SECRET: ClassVar[tuple[str, ...]] = ("token",)
    REPLACE: ClassVar[tuple[str, ...]] = ()
    DERIVED: ClassVar[tuple[str, ...]] = ("complete",)

    def identity(self, props: Props) -> str:
        return f"checkpoint {props['directory']}"

    def validate(self, props: Props) -> list[CheckFailure]:
        if not posixpath.isabs(str(props["directory"])):
            return [CheckFailure("directory", f"{props['directory']!r} is not absolute")]
        return []

    def derive(self, props: Props) -> dict[str, Any]:
        return {"complete": True}

    def observe(self, target: Target, props: Props) -> Live | None:
        user, directory = str(props["user"]), str(props["directory"])
        files = gather(target, manifest(directory).as_user(user))
        if files is None:
            return None
        contents = gather(target, checkpoint_contents(directory).as_user(user))
        missing = missing_shards(files, contents)
        return {"complete": not missing, "missing": missing, "files": files, "contents": contents}

    def apply(self, target: Target, props: Props, live: Live | None) -> dict[str, Any]:
        if live is not None and live["complete"]:
            return {}
        download = props["download"]
        if not download:
            lacks = ", ".join(live["missing"]) if live else "the directory"
            raise SshError(f"{target.where()}: {self.identity(props)} lacks {lacks}")
        command = download_command(str(props["user"]), download, str(props["directory"]))
        try:
            token = f"{props['token'] or ''}\n"
            ssh.run(target, command, stdin=token, timeout=COPY_TIMEOUT_S)
        except SshError as error:  # the command line holds no secret; stdin is not echoed
            raise SshError(f"downloading {download['repo']}: {error}") from None
        return {}

    def remove(self, target: Target, props: Props) -> None:
        """Never: the weights cost a long download."""


@dataclass(frozen=True)
class CheckpointArgs:
    """The checkpoint in `directory`, `user`'s: downloaded as `download` says (endpoint, repo,
    revision; with `token`), or, without, required to be there."""

    target: Target
    user: str
    directory: str
    download: Mapping[str, str] = field(default_factory=dict)
    token: pulumi.Input[str] | None = None


class Checkpoint(NodeResource, module=PULUMI_MODULE, name="Checkpoint"):
    """The checkpoint on the head. Outputs: files (name -> size, sha256), contents (the index's
    summary per shard), complete."""

    files: pulumi.Output[dict[str, Any]]
    contents: pulumi.Output[dict[str, Any]]

    def __init__(
        self, name: str, args: CheckpointArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        props: dict[str, Any] = {"user": args.user, "directory": args.directory}
        props |= {"download": dict(args.download), "token": args.token or ""}
        props |= {"complete": None, "files": None, "contents": None}
        target = args.target
        super().__init__(CheckpointProvider(), name, target, props, opts, secret_outputs=["token"])


# --- ModelShards ------------------------------------------------------------------------------


def with_lease(target: Target, props: Props, source: str) -> Props:
    """`props` with the route from `source` to this node addressed: on a DHCP rail, by the lease
    this node holds now."""
    route = props["routes"][source]
    if route["to"]:
        return props
    to = leased_address(target, str(route["to_lease"]))
    leased = {**route, "to": to, "to_alias": target.node}
    return {**props, "routes": {**props["routes"], source: leased}}


class ModelShardsProvider(NodeProvider):
    INPUTS: ClassVar[tuple[str, ...]] = (
        "user", "directory", "files", "sources", "routes", "origin", "via", "key_name",
    )  # fmt: skip
    STATE: ClassVar[tuple[str, ...]] = ("files",)
    REPLACE: ClassVar[tuple[str, ...]] = ("directory",)

    def identity(self, props: Props) -> str:
        return f"model files in {props['directory']}"

    def validate(self, props: Props) -> list[CheckFailure]:
        unrouted = sorted(set(props["files"]) - set(props["sources"]))
        if unrouted:
            return [CheckFailure("sources", f"no source for {', '.join(unrouted)}")]
        return []

    def observe(self, target: Target, props: Props) -> Live | None:
        read = manifest(str(props["directory"])).as_user(str(props["user"]))
        files = gather(target, read)
        return None if files is None else {"files": files}

    def apply(self, target: Target, props: Props, live: Live | None) -> dict[str, Any]:
        """Copies what the node lacks; returns how many bytes that moved (`moved_bytes`: 0 when
        a model comes back to a node that kept it), said on the node's line."""
        have = (live or {}).get("files") or {}
        moved = 0
        for name, want in sorted(props["files"].items()):
            if have.get(name) != want:
                self.copy(target, props, name)
                moved += int(want["size"])
        stray = sorted(set(have) - set(props["files"]))
        if stray:  # sparkrack's own directory: a file the plan no longer places here
            paths = [posixpath.join(str(props["directory"]), name) for name in stray]
            ssh.run(target, as_user(str(props["user"]), f"rm -f -- {shlex.join(paths)}"))
        kept = len(props["files"]) - sum(have.get(n) != w for n, w in props["files"].items())
        say(f"{target.where()}: {moved} bytes of weights moved, {kept} files already there")
        return {"moved_bytes": moved}

    def copy(self, target: Target, props: Props, name: str) -> None:
        via = Target.from_props(str(props["via"]["node"]), props["via"]["connection"])
        source = str(props["sources"][name])
        props = with_lease(target, props, source)
        script = copy_script(props, name, source, target.node == via.node, str(props["key_name"]))
        try:
            ssh.run(via, as_user(str(props["user"]), script), timeout=COPY_TIMEOUT_S)
        except SshError as error:
            message = f"copying {name} from {source} failed: {error}"
            raise SshError(f"{target.where()}: {message}") from None

    def remove(self, target: Target, props: Props) -> None:
        """Never: destroying the stack must not cost the weights."""


@dataclass(frozen=True)
class ModelShardsArgs:
    """`files` (name -> size, sha256) wanted in `user`'s `directory`, each from its node in
    `sources`; `routes`, per source node, its directory, its address from the head (`address`)
    and this node's address from it (`to`); `via`: the head, which runs every copy with its key
    `key_name`."""

    target: Target
    user: str
    directory: str
    files: pulumi.Input[dict[str, Any]]
    sources: pulumi.Input[dict[str, str]]
    routes: Mapping[str, Mapping[str, str]]
    via: Target
    key_name: str


class ModelShards(NodeResource, module=PULUMI_MODULE, name="ModelShards"):
    """The node's checkpoint files in `directory` (ModelShardsArgs). Output: files (name ->
    size, sha256), as the node reports them."""

    files: pulumi.Output[dict[str, Any]]

    def __init__(
        self, name: str, args: ModelShardsArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        via = args.via
        props: dict[str, Any] = {"user": args.user, "directory": args.directory}
        props |= {"files": args.files, "sources": args.sources}
        props["routes"] = {source: dict(route) for source, route in args.routes.items()}
        props |= {"origin": via.node, "key_name": args.key_name}
        props["via"] = {"node": via.node, "connection": via.connection_props()}
        super().__init__(ModelShardsProvider(), name, args.target, props, opts)

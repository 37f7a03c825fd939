"""`sparkrack hostkeys`: each node's SSH host key, shown for a person to confirm, then pinned.

sparkrack's transport refuses a node whose key the stack's known_hosts does not pin, and never
adds one itself. This command is how a key gets there without trusting the network: it shows the
key each node offers (a key exchange only: no login, nothing run), the person compares it with
the node's own console, and `--accept` pins only the fingerprints they typed, fetched again and
equal. A key other than the pinned one is shouted and never written.

Exit 0: every node answered and none offers a key other than its pinned one; 1: a node did not
answer, offers another key, or a fingerprint given was refused (then nothing is written); 2: bad
input (the stack, an option).
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import sys
from dataclasses import dataclass
from typing import Any

import paramiko

from sparkrack.cli.options import ERROR_EXIT, stack_options
from sparkrack.config.load import load_stack_file
from sparkrack.plan import make_plan
from sparkrack.text.addresses import host_port
from sparkrack.text.table import table
from sparkrack.transport import host_keys, ssh
from sparkrack.transport.target import SshError, Target, Unreachable

FINGERPRINT = re.compile(r"SHA256:[A-Za-z0-9+/]{43}")
# Where each key type's public half lives on a node (OpenSSH's default HostKey files).
CONSOLE_FILES = {
    "ssh-ed25519": "/etc/ssh/ssh_host_ed25519_key.pub",
    "ssh-rsa": "/etc/ssh/ssh_host_rsa_key.pub",
}
ECDSA_FILE = "/etc/ssh/ssh_host_ecdsa_key.pub"
YES, NO, DIFFERENT = "yes", "no", "DIFFERENT"


def add_hostkeys(commands: Any) -> None:
    command = commands.add_parser(
        "hostkeys",
        parents=[stack_options()],
        help="show each node's SSH host key fingerprint; --accept pins the ones you confirmed",
        description="Connect to each node's SSH port (a key exchange only: no login, nothing run"
        " there) and show the host key it offers, as `ssh-keygen -lf` prints it, and whether the"
        " stack's known_hosts already pins it (yes, no, or DIFFERENT: another key is pinned,"
        " possibly a man-in-the-middle; never overwritten). Compare each fingerprint with the"
        " node's console (`ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub`), then run again"
        " with --accept and --fingerprint NODE=SHA256:... for each node you confirmed: the key is"
        " fetched again and written to the stack's known_hosts only if it is the one you typed.",
    )
    command.add_argument(
        "--accept",
        action="store_true",
        help="pin the keys given with --fingerprint in the stack's known_hosts",
    )
    command.add_argument(
        "--fingerprint",
        action="append",
        type=node_fingerprint,
        default=[],
        metavar="NODE=SHA256:...",
        help="with --accept: the fingerprint you read on NODE's console (once per node)",
    )
    command.add_argument("--json", action="store_true", help="print the keys as JSON")
    command.set_defaults(run=run_hostkeys)


def node_fingerprint(text: str) -> tuple[str, str]:
    node, _, given = text.partition("=")
    if not node or not FINGERPRINT.fullmatch(given):
        raise argparse.ArgumentTypeError(
            f"expected NODE=SHA256:<43 base64 characters> as `ssh-keygen -lf` prints it,"
            f" not {text!r}"
        )
    return node, given


@dataclass(frozen=True)
class Seen:
    """What one node offers and what its known_hosts says of it; `error` when it did not answer
    (or its known_hosts cannot be read)."""

    target: Target
    key: paramiko.PKey | None = None
    pinned: tuple[paramiko.PKey, ...] = ()
    error: SshError | None = None

    @property
    def known(self) -> str:
        if self.key is None:
            return "-"
        if not self.pinned:
            return NO
        return YES if self.key in self.pinned else DIFFERENT

    def row(self) -> dict[str, Any]:
        target, key = self.target, self.key
        return {
            "node": target.node,
            "address": target.host,
            "port": target.port,
            "key_type": key.get_name() if key else None,
            "fingerprint": ssh.sha256_fingerprint(key) if key else None,
            "known": self.known if key else None,
            "known_hosts": target.known_hosts,
            "error": str(self.error) if self.error else None,
        }


def look(target: Target) -> Seen:
    key = host_keys.offered_key(target)
    return Seen(target, key, tuple(host_keys.pinned_keys(target).values()))


def look_at_all(targets: list[Target]) -> list[Seen]:
    outcomes = ssh.on_each(targets, look)
    return [
        outcome if isinstance(outcome, Seen) else Seen(target, error=outcome)
        for target, outcome in ((t, outcomes[t.node]) for t in targets)
    ]


def run_hostkeys(args: argparse.Namespace) -> int:
    plan = make_plan(load_stack_file(args.stack, args.stacks_dir))
    targets = [Target.for_node(node) for node in plan.nodes]
    given, problem = fingerprints_given(args, [t.node for t in targets])
    if problem:
        print(f"sparkrack hostkeys: stack {args.stack}: {problem}", file=sys.stderr)
        return ERROR_EXIT
    seen = look_at_all(targets)
    refused: list[str] = []
    if args.accept:
        refused = accept(seen, given)
        seen = [s if s.error else look_again(s) for s in seen]
    show(args, seen)
    for line in [*problems(seen), *refused]:
        print(f"sparkrack hostkeys: stack {args.stack}: {line}", file=sys.stderr)
    return 1 if refused or any(s.error or s.known == DIFFERENT for s in seen) else 0


def fingerprints_given(args: argparse.Namespace, nodes: list[str]) -> tuple[dict[str, str], str]:
    """The fingerprints typed, by node, or the one-line reason they cannot be used."""
    given: dict[str, str] = {}
    for node, fingerprint in args.fingerprint:
        if node not in nodes:
            return {}, f"--fingerprint {node}=...: no node {node!r}; nodes: {', '.join(nodes)}"
        if node in given:
            return {}, f"--fingerprint {node}=... is given twice"
        given[node] = fingerprint
    if args.accept and not given:
        return {}, "--accept needs --fingerprint NODE=SHA256:... for each node you confirmed"
    if given and not args.accept:
        return {}, "--fingerprint is for --accept: add --accept to pin what you confirmed"
    return given, ""


def accept(seen: list[Seen], given: dict[str, str]) -> list[str]:
    """Pin every key given, or, when one of them is refused, none: the refusals."""
    chosen = [s for s in seen if s.target.node in given]
    refused = [line for s in chosen if (line := refusal(s, given[s.target.node]))]
    if refused:
        return [*refused, "nothing written"]
    pinned: list[str] = []
    for s in chosen:
        try:
            if s.key is not None and host_keys.pin(s.target, s.key):  # else refusal() said why
                pinned.append(s.target.node)
        except SshError as error:  # the file changed since it was read
            return [str(error), f"pinned before it: {', '.join(pinned) or 'nothing'}"]
    return []


def refusal(seen: Seen, given: str) -> str:
    where = seen.target.where()
    if seen.key is None:
        return f"{where}: refused: it showed no key (see above)"
    offered = ssh.sha256_fingerprint(seen.key)
    if offered != given:
        return (
            f"{where}: refused: it offers {seen.key.get_name()} {offered}, not the {given}"
            f" given; compare again on its console (`{console_command(seen.key)}`)"
        )
    if seen.known == DIFFERENT:
        return f"{where}: refused: known_hosts pins another key for it (see above)"
    return ""


def look_again(seen: Seen) -> Seen:
    """The same offered key against known_hosts as it is now, after pinning."""
    try:
        return Seen(seen.target, seen.key, tuple(host_keys.pinned_keys(seen.target).values()))
    except SshError as error:
        return Seen(seen.target, error=error)


def console_command(key: paramiko.PKey | None) -> str:
    name = key.get_name() if key else "ssh-ed25519"
    path = ECDSA_FILE if name.startswith("ecdsa-") else CONSOLE_FILES.get(name, "<its key>.pub")
    return f"ssh-keygen -lf {path}"


def problems(seen: list[Seen]) -> list[str]:
    lines = [str(s.error) for s in seen if s.error]
    for s in seen:
        if s.known == DIFFERENT and s.key is not None:
            target = s.target
            pinned = ", ".join(ssh.fingerprint(key) for key in s.pinned)
            remove = shlex.join(["ssh-keygen", "-R", ssh.known_hosts_name(target)])
            lines.append(
                f"{target.where()}: DIFFERENT HOST KEY: it offers {ssh.fingerprint(s.key)}, but"
                f" {target.known_hosts} pins {pinned}. Someone may be between you and the node"
                " (a man-in-the-middle), or it was reinstalled. Nothing was changed. Only once"
                f" its console shows the new key: `{remove} -f {shlex.quote(target.known_hosts)}`,"
                " then accept it again"
            )
    return lines


def show(args: argparse.Namespace, seen: list[Seen]) -> None:
    if args.json:
        print(json.dumps({"stack": args.stack, "nodes": [s.row() for s in seen]}, indent=2))
        return
    rows = [
        (
            s.target.node,
            host_port(s.target.host, s.target.port),
            s.key.get_name() if s.key else "-",
            ssh.sha256_fingerprint(s.key) if s.key else failure(s.error),
            s.known,
        )
        for s in seen
    ]
    files = sorted({s.target.known_hosts for s in seen})
    print(f"sparkrack hostkeys: stack {args.stack} (known_hosts: {', '.join(files)})")
    print("\n".join(table(rows, ("node", "address", "key type", "fingerprint", "known"))))
    if any(s.known == NO for s in seen):
        print(next_step(args, [s for s in seen if s.known == NO]))


def failure(error: SshError | None) -> str:
    return "unreachable" if isinstance(error, Unreachable) else "error (below)"


def next_step(args: argparse.Namespace, unknown: list[Seen]) -> str:
    stacks_dir = ["--stacks-dir", str(args.stacks_dir)] if args.stacks_dir else []
    command = shlex.join(["sparkrack", "hostkeys", "--stack", args.stack, *stacks_dir, "--accept"])
    typed = " ".join(f"--fingerprint {s.target.node}=SHA256:..." for s in unknown)
    return (
        f"\nNot pinned yet: {', '.join(s.target.node for s in unknown)}. On each node's own"
        f" console (not over this network), run\n  {console_command(unknown[0].key)}\nand if"
        f" it shows the same fingerprint, accept what you read there:\n  {command} {typed}"
    )

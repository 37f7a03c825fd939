"""Nodes this run cannot use, said once each: no answer, or a host key that is not the pinned one.

The program asks every node whose key is pinned once, before wiring anything (`ssh.unavailable`;
a node not pinned has nothing of sparkrack's on it yet, and is not contacted). A node that fails
is reported in one line, naming it, its address and (for a key) both fingerprints; its resources
stand still: the refresh that opens every run marks them (`base.NodeProvider.unread`) and `diff`
then plans nothing for them, so no resource retries the node and no traceback follows. The other
nodes converge; then, on `up`, a last step fails, naming the nodes, so the run ends non-zero.
This step is a `pulumi_command` local Command: a one-shot with nothing to read back.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import pulumi
from pulumi_command import local

from sparkrack.transport import ssh
from sparkrack.transport.target import Target

FAIL_WITH_MESSAGE = 'printf "%s\\n" "$SPARKRACK_UNAVAILABLE" >&2; exit 1'


def say_unavailable(targets: Iterable[Target]) -> dict[str, str]:
    """node -> why it cannot be used this run, each said once as an error of the run."""
    unusable = ssh.unavailable(targets, only_pinned=True)
    found = {node: str(error) for node, error in unusable.items()}
    for reason in found.values():
        pulumi.log.error(f"{reason}; nothing on it was read or changed")
    return found


def fail_after(unavailable: dict[str, str], after: Sequence[pulumi.Resource]) -> None:
    """On `up`, with any node unavailable: a last step, after everything else, that fails and
    so ends the run non-zero (a preview only says why)."""
    if unavailable and not pulumi.runtime.is_dry_run():
        local.Command(
            "unavailable-nodes",
            create=FAIL_WITH_MESSAGE,
            environment={"SPARKRACK_UNAVAILABLE": left_as_they_were(unavailable)},
            opts=pulumi.ResourceOptions(depends_on=list(after)),
        )


def left_as_they_were(unavailable: dict[str, str]) -> str:
    names = ", ".join(sorted(unavailable))
    return f"{len(unavailable)} node(s) left as they were: {names} (the reason is above)"

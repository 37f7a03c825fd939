"""Ray's own view of its cluster, read inside a Ray container.

`ray status` is not that view: its autoscaler summary keeps listing a worker that died as
Active (ray-project/ray#63566, Ray 2.52 to 2.55), so after one worker restart it counts a ghost
and a missing worker goes unseen. The GCS node table marks each node alive or dead; a short
driver reads it.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass

from sparkrack.facts import Fact
from sparkrack.text.commands import podman_exec

ALIVE_NODES_SCRIPT = (
    "import json, ray; "
    "ray.init(address='auto', logging_level='ERROR', log_to_driver=False); "
    "print(json.dumps(sorted(n['NodeManagerAddress'] for n in ray.nodes() if n['Alive'])))"
)


def alive_nodes_command() -> tuple[str, ...]:
    """argv, run in the head's Ray container, printing the alive nodes' addresses as JSON."""
    return ("python3", "-c", ALIVE_NODES_SCRIPT)


def parse_alive_nodes(stdout: str) -> tuple[str, ...]:
    """The addresses printed by `alive_nodes_command`: the last line that is a JSON list. Ray
    may log around it, on stderr, which the query reads too: before it, and (seen once in CI on
    sim-16) after it, in lines that start with `[` as a JSON list does."""
    lines = stdout.strip().splitlines()
    if not lines:
        raise ValueError("no output from the Ray node query")
    for line in reversed(lines):
        try:
            addresses = json.loads(line)
        except ValueError:
            continue
        if isinstance(addresses, list):
            return tuple(str(address) for address in addresses)
    raise ValueError(f"Ray node query printed no JSON list; its last line: {lines[-1]!r}")


FAILED = "#query-failed"


@dataclass(frozen=True)
class AliveNodes:
    """The alive nodes' addresses, or None and the query's last words when it printed none."""

    addresses: tuple[str, ...] | None
    error: str = ""


def parse_alive_nodes_query(stdout: str) -> AliveNodes:
    """What `alive_nodes` printed: the address list, or the line before its failure marker."""
    lines = stdout.strip().splitlines()
    if lines and lines[-1] == FAILED:
        return AliveNodes(None, lines[-2].strip() if len(lines) > 1 else "")
    return AliveNodes(parse_alive_nodes(stdout))


def alive_nodes(container: str) -> Fact[AliveNodes]:
    """The node query run in `container`; read it with `.as_user(user)`, the engine's Podman."""
    # A stopped container or a Ray not yet up is a reading: its error, then the marker.
    query = podman_exec(container, alive_nodes_command())
    # A failed query is asked again (resources.engine), not answered from a refresh's first.
    return Fact(
        f"{query} 2>&1 || echo {shlex.quote(FAILED)}",
        parse_alive_nodes_query,
        keep=lambda found: found.addresses is not None,
    )

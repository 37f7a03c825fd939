"""The TCP sockets a node listens on (`ss -Hltn`): what verification holds to the Plan's
listeners (plan.listeners)."""

from __future__ import annotations

from sparkrack.facts import Fact


def listening_sockets(ss_output: str) -> list[tuple[str, int]]:
    """(address, port) of each line of `ss -Hltn`: `0.0.0.0:22`, `*:9100`, `[::1]:631`,
    `127.0.0.53%lo:53` (the interface suffix dropped, brackets too)."""
    sockets = []
    for line in ss_output.splitlines():
        fields = line.split()
        if len(fields) < 4:
            continue
        address, _, port = fields[3].rpartition(":")
        sockets.append((address.split("%")[0].strip("[]"), int(port)))
    return sockets


def listening() -> Fact[list[tuple[str, int]]]:
    return Fact("ss -Hltn", listening_sockets)

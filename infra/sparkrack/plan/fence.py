"""Ray's every-address servers, answered only on the node's planned address.

This Ray binds its GCS, node manager, object manager and workers on every address whatever
`--node-ip-address` says (listeners.RAY_EVERYWHERE; tried on 2.54.1, 2.55.1 and 2.60.0: still
`*:6379`). On a real box that is the fabric and any office LAN, and a reachable Ray runs
arbitrary code (Ray's security page). So each node carries a small nftables table of
sparkrack's own: those ports answer on the planned address and on loopback, and every other
connection to them is reset, as a port nobody listens on would be. Every other service binds its
planned address itself; the fence is for what cannot, not a substitute.

`Fence.rules` is the table as `nft -j list ruleset` reads back through facts/nft.py (the same
words `nft list` prints), so a rule flushed or edited by hand is drift on that node.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

from sparkrack.plan.listeners import Listener
from sparkrack.spec import StrictModel

FENCE_TABLE = "sparkrack_ray_fence"  # family inet: one table for IPv4 and IPv6
FENCE_CHAIN = "input"
FENCE_HOOK = "type filter hook input priority filter; policy accept;"


def merged(ranges: Iterable[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    """Port ranges sorted, with touching ones joined, as nft keeps an interval set."""
    joined: list[tuple[int, int]] = []
    for first, last in sorted(ranges):
        if joined and first <= joined[-1][1] + 1:
            joined[-1] = (joined[-1][0], max(last, joined[-1][1]))
        else:
            joined.append((first, last))
    return tuple(joined)


def port_set(ranges: tuple[tuple[int, int], ...]) -> str:
    """`6379`, or `{ 6379, 52369-52370 }`: the way nft writes a port or a set of them."""
    items = [str(first) if first == last else f"{first}-{last}" for first, last in ranges]
    return items[0] if len(items) == 1 else "{ " + ", ".join(items) + " }"


class Fence(StrictModel):
    """One node's fence: the planned address and the ports that bind every address."""

    address: str
    ports: tuple[tuple[int, int], ...]  # merged ranges, ascending

    @property
    def rules(self) -> tuple[str, ...]:
        """The table's one chain, its hook and its rules, as facts.nft reads them back."""
        ports = port_set(self.ports)
        family = "ip6" if ipaddress.ip_address(self.address).version == 6 else "ip"
        return (
            f"chain {FENCE_CHAIN}",
            FENCE_HOOK,
            'iif "lo" accept',
            f"tcp dport {ports} {family} daddr {self.address} accept",
            f"tcp dport {ports} reject with tcp reset",
        )

    @property
    def script(self) -> str:
        """What `nft -f` loads in one transaction: the table replaced whole (declared first, so
        that deleting it cannot fail on a node that has none yet)."""
        body = "\n".join(f"\t\t{rule}" for rule in self.rules[1:])
        return (
            "#!/usr/sbin/nft -f\n"
            "# managed by sparkrack: Ray's every-address ports, answered on the planned address\n"
            f"table inet {FENCE_TABLE}\n"
            f"delete table inet {FENCE_TABLE}\n"
            f"table inet {FENCE_TABLE} {{\n\tchain {FENCE_CHAIN} {{\n{body}\n\t}}\n}}\n"
        )


def node_fence(address: str, listeners: Iterable[Listener]) -> Fence:
    """The fence for the node's listeners that bind every address (all of them Ray's)."""
    ranges = merged((each.port, each.last_port) for each in listeners if each.everywhere)
    return Fence(address=address, ports=ranges)

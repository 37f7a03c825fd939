"""The node fence: who may connect to the services the Plan puts on a node.

This Ray binds its GCS, node manager, object manager and workers on every address whatever
`--node-ip-address` says (listeners.RAY_EVERYWHERE; tried on 2.54.1, 2.55.1 and 2.60.0: still
`*:6379`), and a reachable Ray runs arbitrary code (Ray's security page); the API answers anyone
who reaches it. So each node carries one nftables table of sparkrack's own, on the node's planned
(management) address and loopback:
- Ray's ports and the exporters (scraped by the rack's own Prometheus) admit the rack's nodes
  only: every node's management address and fabric addresses;
- the API, Prometheus and Grafana admit the rack and the stack's `client_networks` (default: the
  /24, IPv6 /64, of each node's management address);
- every other connection to those ports is reset, as a port nobody listens on would be; the
  fenced ports answer nothing on another address of the node (the fabric's). SSH is not fenced.

`Fence.rules` is the table as `nft -j list ruleset` reads back through facts/nft.py (the same
words `nft list` prints: port and address sets joined where they touch, a prefix where an
interval is one), so a rule flushed or edited by hand is drift on that node.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence

from sparkrack.plan.fabric import LinkPlan
from sparkrack.plan.listeners import Listener
from sparkrack.stackspec import ClusterSpec, StrictModel
from sparkrack.stackspec.errors import Problem

FENCE_TABLE = "sparkrack_ray_fence"  # family inet: one table for IPv4 and IPv6 (name kept: state)
FENCE_CHAIN = "input"
FENCE_HOOK = "type filter hook input priority filter; policy accept;"
# What people use from outside the rack; every other planned service serves the rack itself.
CLIENT_SERVICES = frozenset({"api", "prometheus", "grafana"})
# The default client network around a management address: its LAN, as most are numbered.
DEFAULT_CLIENT_PREFIX = {4: 24, 6: 64}

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def merged(ranges: Iterable[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    """Ranges sorted, with touching ones joined, as nft keeps an interval set."""
    joined: list[tuple[int, int]] = []
    for first, last in sorted(ranges):
        if joined and first <= joined[-1][1] + 1:
            joined[-1] = (joined[-1][0], max(last, joined[-1][1]))
        else:
            joined.append((first, last))
    return tuple(joined)


def nft_set(items: Sequence[str]) -> str:
    """`x`, or `{ x, y }`: the way nft writes one value or a set of them."""
    return items[0] if len(items) == 1 else "{ " + ", ".join(items) + " }"


def port_set(ranges: tuple[tuple[int, int], ...]) -> str:
    """`6379`, or `{ 6379, 52369-52370 }`."""
    return nft_set([str(first) if first == last else f"{first}-{last}" for first, last in ranges])


def address_intervals(networks: Iterable[Network]) -> tuple[str, ...]:
    """Networks (one family) as nft lists an interval set of them: overlapping and touching ones
    joined, each interval an address, a prefix when it is one, else a range."""
    given = list(networks)
    kind = ipaddress.IPv4Address if all(n.version == 4 for n in given) else ipaddress.IPv6Address
    spans = merged((int(n.network_address), int(n.broadcast_address)) for n in given)
    return tuple(interval_words(kind(first), kind(last)) for first, last in spans)


def interval_words(
    first: ipaddress.IPv4Address | ipaddress.IPv6Address,
    last: ipaddress.IPv4Address | ipaddress.IPv6Address,
) -> str:
    if first == last:
        return str(first)
    blocks = list(ipaddress.summarize_address_range(first, last))
    return str(blocks[0]) if len(blocks) == 1 else f"{first}-{last}"


class Fence(StrictModel):
    """One node's fence: the address its fenced ports answer on, those ports (merged ranges,
    ascending) by who may reach them, and the sources (nft's words, the address's family)."""

    address: str
    rack_ports: tuple[tuple[int, int], ...]  # Ray's, the exporters': the rack's nodes only
    client_ports: tuple[tuple[int, int], ...]  # the API's, the dashboards': clients too
    rack: tuple[str, ...]  # every node's management and fabric addresses
    clients: tuple[str, ...]  # the rack and the client networks, joined

    @property
    def family(self) -> str:
        return "ip6" if ipaddress.ip_address(self.address).version == 6 else "ip"

    @property
    def rules(self) -> tuple[str, ...]:
        """The table's one chain, its hook and its rules, as facts.nft reads them back."""
        to = f"{self.family} daddr {self.address} {self.family} saddr"
        admitted = [
            f"tcp dport {port_set(ports)} {to} {nft_set(sources)} accept"
            for ports, sources in ((self.rack_ports, self.rack), (self.client_ports, self.clients))
            if ports
        ]
        every_port = port_set(merged(self.rack_ports + self.client_ports))
        return (
            f"chain {FENCE_CHAIN}",
            FENCE_HOOK,
            'iif "lo" accept',
            *admitted,
            f"tcp dport {every_port} reject with tcp reset",
        )

    @property
    def script(self) -> str:
        """What `nft -f` loads in one transaction: the table replaced whole (declared first, so
        that deleting it cannot fail on a node that has none yet)."""
        body = "\n".join(f"\t\t{rule}" for rule in self.rules[1:])
        return (
            "#!/usr/sbin/nft -f\n"
            "# managed by sparkrack: the planned services answer the rack and its clients only\n"
            f"table inet {FENCE_TABLE}\n"
            f"delete table inet {FENCE_TABLE}\n"
            f"table inet {FENCE_TABLE} {{\n\tchain {FENCE_CHAIN} {{\n{body}\n\t}}\n}}\n"
        )


def rack_networks(spec: ClusterSpec, links: dict[str, tuple[LinkPlan, ...]]) -> list[Network]:
    """Every node's management address and fabric addresses (with DHCP, the rail's /24 its
    lease is checked to fall in; nothing when the stack declares none)."""
    found = [ipaddress.ip_network(node.address) for node in spec.nodes]
    for link in (link for node_links in links.values() for link in node_links):
        if link.address is not None:
            found.append(ipaddress.ip_network(ipaddress.ip_interface(link.address).ip))
        elif link.network is not None:
            found.append(ipaddress.ip_network(link.network))
    return found


def client_networks(spec: ClusterSpec) -> list[Network]:
    """The stack's client networks, or the default: each node's management LAN."""
    if spec.client_networks is not None:
        return [ipaddress.ip_network(each) for each in spec.client_networks]
    addresses = [ipaddress.ip_address(node.address) for node in spec.nodes]
    return [
        ipaddress.ip_network(f"{each}/{DEFAULT_CLIENT_PREFIX[each.version]}", strict=False)
        for each in addresses
    ]


def host_name_problems(spec: ClusterSpec) -> list[Problem]:
    """The fence admits sources by address: a node named by a host name has none to admit."""
    return [
        Problem(
            f"nodes[{i}] ({node.name}).address",
            f"{node.address} is a host name: the node fence admits the rack's nodes by their IP"
            " address, give this node's",
            node.name,
        )
        for i, node in enumerate(spec.nodes)
        if not _is_ip(node.address)
    ]


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def node_fence(
    address: str, listeners: Iterable[Listener], rack: list[Network], clients: list[Network]
) -> Fence:
    """The fence for the node's listeners: its management address, from `rack` and `clients`
    the sources of the address's own family."""
    version = ipaddress.ip_address(address).version
    rack_here = [each for each in rack if each.version == version]
    clients_here = rack_here + [each for each in clients if each.version == version]
    planned = list(listeners)

    def ports(for_clients: bool) -> tuple[tuple[int, int], ...]:
        chosen = (each for each in planned if (each.key in CLIENT_SERVICES) == for_clients)
        return merged((each.port, each.last_port) for each in chosen)

    return Fence(
        address=address,
        rack_ports=ports(for_clients=False),
        client_ports=ports(for_clients=True),
        rack=address_intervals(rack_here),
        clients=address_intervals(clients_here),
    )

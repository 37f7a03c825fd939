"""`sparkrack doctor`'s cable map: the declared cables at port level against what the probes saw
(which peer port answers each port's ARP), every wrong, missing or undeclared cable a finding, and
the corrected map as YAML to paste into the stack. Pure."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from sparkrack.ops.doctor.readings import Finding, PortProbe, RackReading
from sparkrack.plan import Plan
from sparkrack.plan.fabric import LinkPlan
from sparkrack.stackspec import ClusterSpec

PortEnd = tuple[str, str]  # (node, port name) or (node, netdev)
PortCable = tuple[PortEnd, PortEnd]


@dataclass(frozen=True)
class Wiring:
    """The declared cable map at port level, and which port each netdev belongs to."""

    order: tuple[str, ...]
    port_of: Mapping[PortEnd, str]  # (node, netdev) -> port name
    declared: frozenset[PortCable]
    switched: bool

    def cable(self, a: PortEnd, b: PortEnd) -> PortCable:
        """(node, netdev) ends as a port-level cable, the stack's first node first."""
        ends = sorted(((a[0], self.port_of[a]), (b[0], self.port_of[b])), key=self._rank)
        return (ends[0], ends[1])

    def _rank(self, end: PortEnd) -> tuple[int, str]:
        return (self.order.index(end[0]), end[1])


def wiring(spec: ClusterSpec) -> Wiring:
    port_of = {
        (node.name, function.netdev): port.name
        for node in spec.nodes
        for port in spec.hardware(node).ports
        for function in port.functions
    }
    order = tuple(node.name for node in spec.nodes)
    declared = set()
    cables = spec.fabric.cables if spec.fabric else ()
    for cable in cables:
        a = (cable.a.node, spec.endpoint_port(cable.a).name)
        b = (cable.b.node, spec.endpoint_port(cable.b).name)
        ends = sorted((a, b), key=lambda end: (order.index(end[0]), end[1]))
        declared.add((ends[0], ends[1]))
    switched = bool(spec.fabric and spec.fabric.switch)
    return Wiring(order, port_of, frozenset(declared), switched)


def observed_cables(wires: Wiring, probes: Mapping[str, Mapping[str, PortProbe]]) -> set[PortCable]:
    """Every port-level cable some frame crossed; the two halves of a port give one cable."""
    cables = set()
    for node, ports in probes.items():
        for netdev, probe in ports.items():
            for peer in probe.heard:
                if peer in wires.port_of and (node, netdev) in wires.port_of:
                    cables.add(wires.cable((node, netdev), peer))
    return cables


def cable_map_yaml(cables: set[PortCable], wires: Wiring) -> str:
    """The observed map as the stack file's `fabric.cables`, ready to paste."""
    ordered = sorted(cables, key=lambda c: (wires._rank(c[0]), wires._rank(c[1])))
    lines = ["    cables:"]
    lines += [f'      - {{a: "{a[0]}:{a[1]}", b: "{b[0]}:{b[1]}"}}' for a, b in ordered]
    return "\n".join(lines)


def describe_cable(cable: PortCable) -> str:
    (a_node, a_port), (b_node, b_port) = cable
    shape = "crossed" if a_port != b_port else "straight"
    return f"{a_node}:{a_port} <-> {b_node}:{b_port} ({shape})"


def cable_findings(plan: Plan, wires: Wiring, reading: RackReading) -> list[Finding]:
    if wires.switched:
        return list(switch_findings(plan, reading))
    probed = reading.probes
    findings = port_mapping_findings(wires, probed)
    for node in plan.nodes:
        for link in node.links:
            if link.peer_node and wires.order.index(link.peer_node) > wires.order.index(node.name):
                findings.append(cable_half(node.name, link, probed))
    findings += undeclared(plan, probed)
    return findings


def port_mapping_findings(
    wires: Wiring, probed: Mapping[str, Mapping[str, PortProbe]]
) -> list[Finding]:
    """A cable joins one port to one port, so the netdevs the profile calls one port's halves
    must hear the halves of one peer port. Where they hear two, the profile's mapping of netdevs
    to ports is not the box's (FACTS: the f0 pair is port 0; some field notes map by PCI
    domain), and NCCL's HCA pairs, chosen from it, would sit on different cables."""
    heard = {(n, d): probe.heard for n, ports in probed.items() for d, probe in ports.items()}
    if mapping_fits(wires.port_of, heard):
        return []
    by_domain = domain_mapping(wires.port_of)
    fix = (
        "declare a hardware profile (hardware_profiles: {NAME: {base: ..., ports: [...]}}) whose"
        f" ports are {groups_of(by_domain)}: grouped by PCI domain, every cable seen fits"
        if mapping_fits(by_domain, heard)
        else "the cables seen fit no port mapping: test each half with `ib_write_bw`"
    )
    return [
        Finding("FAIL", node, f"port mapping {port}", f"{port}'s halves reach {reached}", fix)
        for node, port, reached in mapping_misfits(wires.port_of, heard)
    ]


def mapping_misfits(
    port_of: Mapping[PortEnd, str], heard: Mapping[PortEnd, tuple[PortEnd, ...]]
) -> Iterator[tuple[str, str, str]]:
    """(node, port, the peer ports its halves reach) wherever they reach more than one."""
    reached: dict[PortEnd, set[PortEnd]] = {}
    for (node, netdev), peers in heard.items():
        if (node, netdev) in port_of:
            ends = {(peer, port_of[(peer, d)]) for peer, d in peers if (peer, d) in port_of}
            reached.setdefault((node, port_of[(node, netdev)]), set()).update(ends)
    for (node, port), ends in sorted(reached.items()):
        if len(ends) > 1:
            yield node, port, " and ".join(f"{n}:{p}" for n, p in sorted(ends))


def mapping_fits(
    port_of: Mapping[PortEnd, str], heard: Mapping[PortEnd, tuple[PortEnd, ...]]
) -> bool:
    return next(mapping_misfits(port_of, heard), None) is None


DOMAIN = re.compile(r"^en(?:P(\d+))?p")  # enP2p1s0f0np0: PCI domain 2; enp1s0f0np0: none, 0


def domain_mapping(port_of: Mapping[PortEnd, str]) -> dict[PortEnd, str]:
    """The same netdevs grouped by PCI domain (`enP2p1s0f0np0` is domain 2, `enp1s0f0np0` 0):
    the other mapping field notes give a GB10's ports."""
    return {(node, netdev): f"domain{pci_domain(netdev)}" for node, netdev in port_of}


def pci_domain(netdev: str) -> str:
    found = DOMAIN.match(netdev)
    return (found.group(1) if found else None) or "0"


def groups_of(port_of: Mapping[PortEnd, str]) -> str:
    """One node's ports as netdev groups: `[enp1s0f0np0, enp1s0f1np1], [...]`."""
    first = min(node for node, _ in port_of)
    groups: dict[str, list[str]] = {}
    for (node, netdev), port in sorted(port_of.items()):
        if node == first:
            groups.setdefault(port, []).append(netdev)
    return ", ".join(f"[{', '.join(netdevs)}]" for _, netdevs in sorted(groups.items()))


def cable_half(node: str, link: LinkPlan, probed: Mapping[str, Mapping[str, PortProbe]]) -> Finding:
    assert link.peer_node is not None and link.peer_netdev is not None
    check = f"cable {link.netdev} -> {link.peer_node}:{link.peer_netdev}"
    if node not in probed or link.peer_node not in probed:
        return Finding("skip", node, check, "one end was not probed (see its errors above)")
    heard = probed[node].get(link.netdev, PortProbe(False)).heard
    if (link.peer_node, link.peer_netdev) in heard:
        return Finding("ok", node, check, f"{link.port}: peer heard as declared")
    if not heard:
        return Finding(
            "FAIL",
            node,
            check,
            "no peer heard (no frame crossed)",
            "check that a cable is plugged into both ports and both ends have carrier",
        )
    seen = ", ".join(f"{n}:{p}" for n, p in heard)
    return Finding(
        "FAIL",
        node,
        check,
        f"wired to {seen} instead",
        "the cable map differs from the wiring: use the observed map below (or re-plug)",
    )


def undeclared(plan: Plan, probed: Mapping[str, Mapping[str, PortProbe]]) -> list[Finding]:
    findings = []
    for node in plan.nodes:
        declared = {link.netdev for link in node.links}
        for netdev, probe in probed.get(node.name, {}).items():
            if netdev not in declared and probe.heard:
                seen = ", ".join(f"{n}:{p}" for n, p in probe.heard)
                findings.append(
                    Finding(
                        "FAIL",
                        node.name,
                        f"cable {netdev}",
                        f"cabled to {seen}, not declared",
                        "declare the cable (see the observed map below) or unplug it",
                    )
                )
    return findings


def switch_findings(plan: Plan, reading: RackReading) -> Iterator[Finding]:
    """Behind a switch a port hears every node on its rail: it must hear at least one."""
    for node in plan.nodes:
        ports = reading.probes.get(node.name)
        if ports is None:
            continue
        for link in node.links:
            heard = ports.get(link.netdev, PortProbe(False)).heard
            check = f"switch {link.netdev}"
            if heard:
                yield Finding(
                    "ok", node.name, check, f"{link.peer}: hears {len(heard)} peer port(s)"
                )
            else:
                yield Finding(
                    "FAIL",
                    node.name,
                    check,
                    f"{link.peer}: hears no other node",
                    "check the cable to the switch, its port's VLAN and breakout setting",
                )


def cable_summary(wires: Wiring, reading: RackReading) -> str | None:
    """When the observed wiring differs from the declared map: what differs, and the fix."""
    if wires.switched or not reading.probes or reading.probe_errors:
        return None
    observed = observed_cables(wires, reading.probes)
    if not observed or observed == wires.declared:
        return None
    declared_crossed = any(a[1] != b[1] for a, b in wires.declared)
    observed_crossed = any(a[1] != b[1] for a, b in observed)
    if observed_crossed and not declared_crossed:
        verdict = "the cables are CROSSED (port 0 meets port 1); the stack declares them straight"
    elif declared_crossed and not observed_crossed:
        verdict = "the cables are STRAIGHT; the stack declares them crossed"
    else:
        verdict = "the wiring differs from the stack's cable map"
    lines = [
        f"Cable map: {verdict}.",
        "  declared: " + "; ".join(describe_cable(c) for c in sorted(wires.declared)),
        "  observed: " + "; ".join(describe_cable(c) for c in sorted(observed)),
        "  corrected map for the stack file, under sparkrack:cluster.fabric:",
        cable_map_yaml(observed, wires),
    ]
    return "\n".join(lines)

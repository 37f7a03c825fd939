"""`sparkrack doctor`'s judgement: readings from the nodes in, findings with a next step out.

Pure: the readings come from `doctor_gather` (SSH) or, in tests, from captured output. A finding
is `FAIL` when something is wrong now, `todo` when `pulumi up` has simply not configured it yet
(a fresh port: down, MTU 1500, no address), `skip` when it cannot be checked yet, else `ok`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from sparkrack.facts.links import LinkState
from sparkrack.facts.nccl_env import EnvHit, image_env_hits
from sparkrack.facts.ping import PingResult
from sparkrack.plan import NodePlan, Plan
from sparkrack.plan.fabric import LinkPlan, PingCheck
from sparkrack.spec import ClusterSpec

Status = Literal["ok", "FAIL", "todo", "skip"]
UNLIMITED = "infinity"


@dataclass(frozen=True)
class Finding:
    status: Status
    node: str
    check: str
    observed: str
    next_step: str = ""


@dataclass(frozen=True)
class PortProbe:
    """One fabric port as the cable probe saw it (see cable_probe_node.py)."""

    present: bool
    was_up: bool = False
    carrier: bool = False
    speed_mbps: str | None = None
    mtu: int = 0
    heard: tuple[tuple[str, str], ...] = ()


def parse_probe(stdout: str) -> dict[str, PortProbe]:
    ports = {}
    for netdev, seen in json.loads(stdout).items():
        heard = tuple((str(node), str(port)) for node, port in seen.get("heard", []))
        ports[netdev] = PortProbe(
            present=bool(seen["present"]),
            was_up=bool(seen.get("was_up", False)),
            carrier=bool(seen.get("carrier", False)),
            speed_mbps=seen.get("speed_mbps"),
            mtu=int(seen.get("mtu", 0)),
            heard=heard,
        )
    return ports


@dataclass(frozen=True)
class NodeReading:
    os_name: str
    links: Mapping[str, LinkState]
    rdma: Mapping[str, str]
    memlock: str
    env_hits: Sequence[EnvHit]
    image_env: Sequence[str] | None  # None: the image is not on the node


@dataclass(frozen=True)
class RackReading:
    nodes: Mapping[str, NodeReading] = field(default_factory=dict)
    unreachable: Mapping[str, str] = field(default_factory=dict)  # node -> the SSH error
    read_errors: Mapping[str, str] = field(default_factory=dict)  # node -> a read that failed
    probes: Mapping[str, Mapping[str, PortProbe]] = field(default_factory=dict)
    probe_errors: Mapping[str, str] = field(default_factory=dict)
    pings: Mapping[int, PingResult] = field(default_factory=dict)  # index in plan.jumbo_pings


# --- the cable map ----------------------------------------------------------------------------


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
    findings = []
    for node in plan.nodes:
        for link in node.links:
            if link.peer_node and wires.order.index(link.peer_node) > wires.order.index(node.name):
                findings.append(cable_half(node.name, link, probed))
    findings += undeclared(plan, probed)
    return findings


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


# --- per node ---------------------------------------------------------------------------------


def node_findings(
    node: NodePlan,
    reading: NodeReading,
    ports: Mapping[str, PortProbe] | None,
    image: str,
    service_user: str,
) -> list[Finding]:
    findings = [Finding("ok", node.name, "ssh, OS", reading.os_name)]
    for link in node.links:
        findings += port_findings(node.name, link, reading.links.get(link.netdev), ports)
    findings += rdma_findings(node, reading)
    findings.append(memlock_finding(node, reading.memlock, service_user))
    findings += nccl_findings(node.name, reading, image)
    return findings


def configured(link: LinkState | None) -> bool:
    """Someone (pulumi up, or a hand) has set the port up or given it an address."""
    return link is not None and (link.up or bool(link.addresses))


def port_findings(
    node: str, plan: LinkPlan, live: LinkState | None, ports: Mapping[str, PortProbe] | None
) -> list[Finding]:
    netdev = plan.netdev
    if live is None:
        return [
            Finding(
                "FAIL",
                node,
                f"port {netdev}",
                "netdev missing",
                "check the NIC driver (mlx5_core) and the hardware profile's netdev names",
            )
        ]
    return [carrier_finding(node, netdev, ports), mtu_finding(node, plan, live)]


def carrier_finding(node: str, netdev: str, ports: Mapping[str, PortProbe] | None) -> Finding:
    check = f"carrier {netdev}"
    probe = ports.get(netdev) if ports is not None else None
    if probe is None or not probe.present:
        return Finding("skip", node, check, "not probed")
    raised = "" if probe.was_up else " (port was down: raised for the probe only)"
    if not probe.carrier:
        return Finding(
            "FAIL", node, check, f"no carrier{raised}", "check the cable and the peer port"
        )
    return Finding("ok", node, check, f"carrier, {probe.speed_mbps or '?'} Mb/s{raised}")


def mtu_finding(node: str, plan: LinkPlan, live: LinkState) -> Finding:
    check = f"MTU {plan.netdev}"
    observed = f"MTU {live.mtu}, plan {plan.mtu}"
    if live.mtu == plan.mtu:
        return Finding("ok", node, check, observed)
    if not configured(live):
        return Finding("todo", node, check, f"{observed} (port not configured yet)", "pulumi up")
    return Finding(
        "FAIL",
        node,
        check,
        observed,
        f"ip link set dev {plan.netdev} mtu {plan.mtu} (before the address), or pulumi up",
    )


def rdma_findings(node: NodePlan, reading: NodeReading) -> list[Finding]:
    findings = []
    used = set(node.rdma_devices)
    for nic in node.nics:
        device = nic.rdma_device
        if device is None:
            continue
        state = reading.rdma.get(device)
        check = f"RDMA {device}"
        if state is None:
            findings.append(
                Finding(
                    "FAIL",
                    node.name,
                    check,
                    "missing from /sys/class/infiniband",
                    "load the RDMA driver (mlx5_ib; DOCA-OFED on DGX OS)",
                )
            )
        elif state.endswith("ACTIVE") or device not in used:
            findings.append(Finding("ok", node.name, check, state))
        elif configured(reading.links.get(nic.netdev)):
            findings.append(
                Finding(
                    "FAIL",
                    node.name,
                    check,
                    f"{state} (NCCL uses it)",
                    "check carrier on " + nic.netdev,
                )
            )
        else:
            findings.append(
                Finding("todo", node.name, check, state, "pulumi up brings the port up")
            )
    return findings


def memlock_finding(node: NodePlan, limit: str, user: str) -> Finding:
    want = UNLIMITED if node.memlock_limit is None else str(node.memlock_limit)
    check = f"memlock {user}"
    if not limit:
        return Finding("todo", node.name, check, f"no user {user} yet", "pulumi up makes it")
    observed = f"user manager LimitMEMLOCK={limit}, plan {want}"
    if limit == UNLIMITED or (limit.isdigit() and want.isdigit() and int(limit) >= int(want)):
        return Finding("ok", node.name, check, observed)
    return Finding(
        "FAIL",
        node.name,
        check,
        observed,
        "LimitMEMLOCK=infinity for user@UID.service (pulumi up's base role); without it NCCL"
        " falls back to sockets",
    )


def nccl_findings(node: str, reading: NodeReading, image: str) -> list[Finding]:
    hits = list(reading.env_hits)
    if reading.image_env is not None:
        hits += image_env_hits(reading.image_env, image)
    findings = [
        Finding(
            "FAIL",
            node,
            "NCCL_IB_DISABLE",
            f"={hit.value} in {hit.source}" + (f":{hit.line}" if hit.line else ""),
            "remove it: it forces TCP sockets on RoCE hardware (seed 001: 58% slower)",
        )
        for hit in hits
    ]
    if not findings:
        where = "environment files, systemd, Podman/Quadlet config"
        where += "" if reading.image_env is None else ", the image"
        findings.append(Finding("ok", node, "NCCL_IB_DISABLE", f"not set ({where})"))
    if reading.image_env is None:
        findings.append(Finding("skip", node, "image env", f"{image} not on the node yet"))
    return findings


# --- jumbo pings ------------------------------------------------------------------------------


def ipv4(link: LinkState | None) -> str | None:
    addresses = [a.split("/")[0] for a in (link.addresses if link else ()) if "." in a]
    return addresses[0] if addresses else None


def ping_target(check: PingCheck, reading: RackReading) -> str | None:
    """The peer's live address, when both ends have one: else there is nothing to ping."""
    source = reading.nodes.get(check.from_node)
    target = reading.nodes.get(check.to_node)
    if source is None or target is None or ipv4(source.links.get(check.from_netdev)) is None:
        return None
    return ipv4(target.links.get(check.to_netdev))


def ping_findings(plan: Plan, reading: RackReading) -> list[Finding]:
    findings = []
    for index, check in enumerate(plan.jumbo_pings):
        name = f"jumbo ping {check.from_netdev} -> {check.to_node}:{check.to_netdev}"
        result = reading.pings.get(index)
        if result is None:
            findings.append(
                Finding(
                    "skip", check.from_node, name, "no address on one end", "pulumi up adds them"
                )
            )
        elif result.passed:
            findings.append(
                Finding("ok", check.from_node, name, f"{check.payload_bytes} B, DF: passes")
            )
        else:
            findings.append(
                Finding(
                    "FAIL",
                    check.from_node,
                    name,
                    result.detail,
                    "MTU must be the plan's on both ends and every hop; check the cable map",
                )
            )
    return findings


# --- the whole report -----------------------------------------------------------------------

NODE_FAILURES = (
    ("ssh", "unreachable", "check the node's address, SSH key and pinned known_hosts in the stack"),
    ("read", "read_errors", "SSH works: run the failing command on the node to see why"),
    ("cable probe", "probe_errors", "the probe needs python3 and passwordless sudo on the node"),
)


def node_failure(node: str, reading: RackReading) -> Finding | None:
    """The first thing that kept us from reading the node, if any."""
    for check, field_name, next_step in NODE_FAILURES:
        errors: Mapping[str, str] = getattr(reading, field_name)
        if node in errors:
            return Finding("FAIL", node, check, errors[node], next_step)
    return None


def findings_for(plan: Plan, wires: Wiring, reading: RackReading) -> list[Finding]:
    findings = []
    for node in plan.nodes:
        if failure := node_failure(node.name, reading):
            findings.append(failure)
            if failure.check != "cable probe":
                continue
        ports = reading.probes.get(node.name)
        reading_of = reading.nodes[node.name]
        user = plan.roles.base.service_user.name
        findings += node_findings(node, reading_of, ports, plan.serving.image, user)
    findings += ping_findings(plan, reading)
    findings += cable_findings(plan, wires, reading)
    return findings

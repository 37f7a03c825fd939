"""`sparkrack doctor`'s judgement: readings from the nodes in, findings with a next step out.

Pure: the readings come from `gather` (SSH) or, in tests, from captured output. A finding
is `FAIL` when something is wrong now, `todo` when `pulumi up` has simply not configured it yet
(a fresh port: down, MTU 1500, no address), `skip` when it cannot be checked yet, else `ok`.
"""

from __future__ import annotations

from collections.abc import Mapping

from sparkrack.facts.links import LinkState
from sparkrack.facts.nccl_env import image_env_hits
from sparkrack.ops.doctor.cables import Wiring, cable_findings
from sparkrack.ops.doctor.readings import Finding, NodeReading, PortProbe, RackReading
from sparkrack.plan import NodePlan, Plan
from sparkrack.plan.fabric import LinkPlan, PingCheck

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
    want = node.memlock_limit
    check = f"memlock {user}"
    if not limit:
        return Finding("todo", node.name, check, f"no user {user} yet", "pulumi up makes it")
    observed = f"user manager LimitMEMLOCK={limit}, plan {want.systemd()}"
    if want.granted_by(limit):
        return Finding("ok", node.name, check, observed)
    return Finding(
        "FAIL",
        node.name,
        check,
        observed,
        f"LimitMEMLOCK={want.systemd()} for user@UID.service (pulumi up's base role); without"
        " it NCCL falls back to sockets",
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

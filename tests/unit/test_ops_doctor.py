"""`sparkrack doctor`: parsers on captured node output, and the findings on faked readings."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from sparkrack.config.load import spec_from_config
from sparkrack.facts.links import LinkState
from sparkrack.facts.nccl_env import (
    EnvHit,
    image_env,
    nccl_env_hits,
    parse_env_hits,
    parse_image_env,
)
from sparkrack.facts.os_release import parse_os_release
from sparkrack.facts.ping import PingResult, jumbo_ping_command, parse_ping
from sparkrack.facts.rdma import parse_rdma
from sparkrack.ops.doctor.cables import cable_summary, wiring
from sparkrack.ops.doctor.judge import findings_for, memlock_finding
from sparkrack.ops.doctor.readings import Finding, NodeReading, PortProbe, RackReading, parse_probe
from sparkrack.ops.doctor.report import failed, render_doctor
from sparkrack.plan import Plan, make_plan
from sparkrack.stackspec import ClusterSpec
from sparkrack.text.limits import MemlockLimit

from .support import STACKS, cluster

pytestmark = pytest.mark.unit

GOLDEN = Path(__file__).parent / "golden"
NETDEVS = ("enp1s0f0np0", "enP2p1s0f0np0", "enp1s0f1np1", "enP2p1s0f1np1")
RDMA = ("rocep1s0f0", "roceP2p1s0f0", "rocep1s0f1", "roceP2p1s0f1")


def golden(name: str) -> str:
    return (GOLDEN / name).read_text()


# --- parsers on captured output ---------------------------------------------------------------


def test_os_release() -> None:
    assert parse_os_release(golden("debian13-os-release.txt")) == "Debian GNU/Linux 13 (trixie)"
    assert parse_os_release('NAME="Ubuntu"\nVERSION_ID="24.04"\n') == "Ubuntu 24.04"


def test_rdma_states() -> None:
    assert parse_rdma(golden("gb10-rdma-states-two-cables.txt")) == {
        "roceP2p1s0f0": "1: DOWN",
        "roceP2p1s0f1": "4: ACTIVE",
        "rocep1s0f0": "1: DOWN",
        "rocep1s0f1": "4: ACTIVE",
    }


def test_env_hits_skip_comments_and_zero() -> None:
    home = "/home/sparkrack"

    assert parse_env_hits(golden("debian13-nccl-env-grep.txt")) == [
        EnvHit(f"{home}/.config/environment.d/nccl.conf", 1, "1"),
        EnvHit(f"{home}/.config/containers/systemd/engine.container", 3, "1"),
    ]


def test_env_hits_in_containers_conf_and_the_systemd_manager() -> None:
    output = (
        '/etc/containers/containers.conf:7:env = ["NCCL_IB_DISABLE=1", "A=b"]\n'
        "systemd manager environment:4:NCCL_IB_DISABLE=yes\n"
    )

    assert [(h.source, h.value) for h in parse_env_hits(output)] == [
        ("/etc/containers/containers.conf", "1"),
        ("systemd manager environment", "yes"),
    ]


def test_the_env_scan_searches_every_inherited_place() -> None:
    command = nccl_env_hits().command

    places = ["/etc/environment", "/etc/nccl.conf", "$HOME/.nccl.conf"]
    places += ["$HOME/.config/containers/systemd/*.container", "systemctl --user show-environment"]
    for place in places:
        assert place in command


def test_image_env() -> None:
    assert parse_image_env(golden("debian13-standin-image-env.txt")) == [
        "PATH=/opt/standin/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "PYTHONUNBUFFERED=1",
    ]
    assert parse_image_env("#absent\n") is None
    assert "podman image exists 'localhost/x y'" in image_env("localhost/x y").command


@pytest.mark.parametrize(
    ("name", "status", "result"),
    [
        ("ok", 0, PingResult(True, "3 packets transmitted, 3 received, 0% packet loss, "
                             "time 407ms")),
        ("too-long", 1, PingResult(False, "sendmsg: Message too long; 3 packets transmitted, "
                                   "0 received, +3 errors, 100% packet loss, time 410ms")),
        ("lost", 1, PingResult(False, "sendmsg: No buffer space available; 3 packets "
                               "transmitted, 0 received, 100% packet loss, time 2208ms")),
    ],
)  # fmt: skip
def test_jumbo_ping(name: str, status: int, result: PingResult) -> None:
    assert parse_ping(golden(f"debian13-ping-jumbo-{name}.txt"), status) == result


def test_jumbo_ping_command_is_dont_fragment_at_full_size() -> None:
    command = jumbo_ping_command("enp1s0f0np0", "198.19.0.2", 8972)

    assert command.startswith("ping -M do -s 8972 ")
    assert command.endswith("-I enp1s0f0np0 198.19.0.2 2>&1")


def test_cable_probe_output() -> None:
    ports = parse_probe(golden("debian13-cable-probe-spark-2.json"))

    assert ports["enp1s0f0np0"] == PortProbe(
        present=True, was_up=True, carrier=True, speed_mbps="10000",
        heard=(("spark-1", "enp1s0f1np1"),),
    )  # fmt: skip
    assert parse_probe('{"enp9s0": {"present": false}}') == {"enp9s0": PortProbe(False)}


# --- findings on faked readings ---------------------------------------------------------------


def sim2(cables: list[dict[str, str]] | None = None) -> tuple[ClusterSpec, Plan]:
    raw = cluster("sim-2")
    if cables is not None:
        raw["fabric"]["cables"] = cables
    spec = spec_from_config("sim-2", raw, base_dir=STACKS)
    return spec, make_plan(spec)


STRAIGHT = [
    {"a": "spark-1:port0", "b": "spark-2:port0"},
    {"a": "spark-1:port1", "b": "spark-2:port1"},
]
CROSSED_PEER = {"enp1s0f0np0": "enp1s0f1np1", "enp1s0f1np1": "enp1s0f0np0",
                "enP2p1s0f0np0": "enP2p1s0f1np1", "enP2p1s0f1np1": "enP2p1s0f0np0"}  # fmt: skip


def configured_links(
    plan: Plan, node: str, mtu: dict[str, int] | None = None
) -> dict[str, LinkState]:
    return {
        link.netdev: LinkState(
            link.netdev, True, (mtu or {}).get(link.netdev, 9000),
            (link.address,) if link.address else (),
        )
        for link in plan.node(node).links
    }  # fmt: skip


def healthy_node(plan: Plan, node: str) -> NodeReading:
    return NodeReading(
        os_name="Ubuntu 24.04.3 LTS",
        links=configured_links(plan, node),
        rdma=dict.fromkeys(RDMA, "4: ACTIVE"),
        memlock="8388608",
        env_hits=[],
        image_env=["PATH=/usr/bin"],
    )


def crossed_probe(node: str) -> dict[str, PortProbe]:
    other = "spark-2" if node == "spark-1" else "spark-1"
    return {
        netdev: PortProbe(True, True, True, "200000", ((other, CROSSED_PEER[netdev]),))
        for netdev in NETDEVS
    }


def rack(plan: Plan, **changes: object) -> RackReading:
    reading = RackReading(
        nodes={n: healthy_node(plan, n) for n in ("spark-1", "spark-2")},
        probes={n: crossed_probe(n) for n in ("spark-1", "spark-2")},
        pings={i: PingResult(True, "0% packet loss") for i in range(len(plan.jumbo_pings))},
    )
    return replace(reading, **changes)  # type: ignore[arg-type]


def not_ok(findings: list[Finding]) -> list[tuple[str, str, str, str]]:
    return [(f.status, f.node, f.check, f.observed) for f in findings if f.status != "ok"]


def test_a_healthy_crossed_rack_is_all_ok() -> None:
    spec, plan = sim2()

    findings = findings_for(plan, wiring(spec), rack(plan))

    assert not_ok(findings) == []
    assert not failed(findings)
    assert cable_summary(wiring(spec), rack(plan)) is None
    assert len(findings) == 2 * (1 + 4 * 2 + 4 + 1 + 1) + 4 + 4


def test_crossed_cables_declared_straight_are_found_with_the_corrected_map() -> None:
    spec, plan = sim2(STRAIGHT)
    reading = rack(plan, pings={})

    findings = findings_for(plan, wiring(spec), reading)

    assert [f for f in not_ok(findings) if f[2].startswith("cable")] == [
        ("FAIL", "spark-1", "cable enp1s0f0np0 -> spark-2:enp1s0f0np0",
         "wired to spark-2:enp1s0f1np1 instead"),
        ("FAIL", "spark-1", "cable enP2p1s0f0np0 -> spark-2:enP2p1s0f0np0",
         "wired to spark-2:enP2p1s0f1np1 instead"),
        ("FAIL", "spark-1", "cable enp1s0f1np1 -> spark-2:enp1s0f1np1",
         "wired to spark-2:enp1s0f0np0 instead"),
        ("FAIL", "spark-1", "cable enP2p1s0f1np1 -> spark-2:enP2p1s0f1np1",
         "wired to spark-2:enP2p1s0f0np0 instead"),
    ]  # fmt: skip
    assert cable_summary(wiring(spec), reading) == (
        "Cable map: the cables are CROSSED (port 0 meets port 1); the stack declares them"
        " straight.\n"
        "  declared: spark-1:port0 <-> spark-2:port0 (straight);"
        " spark-1:port1 <-> spark-2:port1 (straight)\n"
        "  observed: spark-1:port0 <-> spark-2:port1 (crossed);"
        " spark-1:port1 <-> spark-2:port0 (crossed)\n"
        "  corrected map for the stack file, under sparkrack:cluster.fabric:\n"
        "    cables:\n"
        '      - {a: "spark-1:port0", b: "spark-2:port1"}\n'
        '      - {a: "spark-1:port1", b: "spark-2:port0"}'
    )


def test_straight_cables_declared_crossed_are_named_so() -> None:
    spec, plan = sim2()
    straight = {
        n: {d: replace(p, heard=((p.heard[0][0], d),)) for d, p in crossed_probe(n).items()}
        for n in ("spark-1", "spark-2")
    }

    summary = cable_summary(wiring(spec), rack(plan, probes=straight))

    assert summary is not None
    assert summary.startswith(
        "Cable map: the cables are STRAIGHT; the stack declares them crossed."
    )
    assert '      - {a: "spark-1:port0", b: "spark-2:port0"}' in summary


def test_ports_paired_by_pci_domain_are_not_the_profiles_and_the_doctor_says_what_to_declare() -> (
    None
):
    """Each cable joins the halves of one port to one port. Here what the frames crossed fits
    ports grouped by PCI domain, not the profile's f0/f1 pairs: NCCL's HCAs, chosen from the
    profile, would sit on different cables."""
    spec, plan = sim2()
    wired = {
        "enp1s0f0np0": "enp1s0f0np0",
        "enp1s0f1np1": "enp1s0f1np1",
        "enP2p1s0f0np0": "enP2p1s0f1np1",
        "enP2p1s0f1np1": "enP2p1s0f0np0",
    }
    back = {far: near for near, far in wired.items()}
    probes = {
        node: {
            d: replace(p, heard=((other, (wired if node == "spark-1" else back)[d]),))
            for d, p in crossed_probe(node).items()
        }
        for node, other in (("spark-1", "spark-2"), ("spark-2", "spark-1"))
    }

    findings = findings_for(plan, wiring(spec), rack(plan, probes=probes))

    mapping = [f for f in findings if f.check.startswith("port mapping")]
    assert [(f.node, f.check, f.observed) for f in mapping][:2] == [
        ("spark-1", "port mapping port0", "port0's halves reach spark-2:port0 and spark-2:port1"),
        ("spark-1", "port mapping port1", "port1's halves reach spark-2:port0 and spark-2:port1"),
    ]
    assert mapping[0].next_step.endswith(
        "whose ports are [enp1s0f0np0, enp1s0f1np1], [enP2p1s0f0np0, enP2p1s0f1np1]: grouped by"
        " PCI domain, every cable seen fits"
    )


def test_an_unplugged_cable_hears_nothing() -> None:
    spec, plan = sim2()
    probes = {n: crossed_probe(n) for n in ("spark-1", "spark-2")}
    for node in probes:
        for netdev in ("enp1s0f0np0", "enp1s0f1np1"):
            probes[node][netdev] = PortProbe(True, False, False, None, ())
    findings = findings_for(plan, wiring(spec), rack(plan, probes=probes))

    assert ("FAIL", "spark-1", "cable enp1s0f0np0 -> spark-2:enp1s0f1np1",
            "no peer heard (no frame crossed)") in not_ok(findings)  # fmt: skip
    no_carrier = "no carrier (port was down: raised for the probe only)"
    assert ("FAIL", "spark-2", "carrier enp1s0f1np1", no_carrier) in not_ok(findings)


def test_mtu_1500_on_a_configured_port_fails_with_the_fix() -> None:
    spec, plan = sim2()
    node = replace(
        healthy_node(plan, "spark-2"),
        links=configured_links(plan, "spark-2", {"enp1s0f0np0": 1500}),
    )
    failing_ping = plan.jumbo_pings.index(
        next(p for p in plan.jumbo_pings if p.to_netdev == "enp1s0f0np0")
    )
    pings = {i: PingResult(i != failing_ping, "sendmsg: Message too long") for i in range(4)}
    reading = rack(
        plan, nodes={"spark-1": healthy_node(plan, "spark-1"), "spark-2": node}, pings=pings
    )

    findings = findings_for(plan, wiring(spec), reading)

    failures = [(f.status, f.node, f.check, f.observed, f.next_step) for f in findings]
    assert [f for f in failures if f[0] != "ok"] == [
        ("FAIL", "spark-2", "MTU enp1s0f0np0", "MTU 1500, plan 9000",
         "ip link set dev enp1s0f0np0 mtu 9000 (before the address), or pulumi up"),
        ("FAIL", "spark-1", "jumbo ping enp1s0f1np1 -> spark-2:enp1s0f0np0",
         "sendmsg: Message too long",
         "MTU must be the plan's on both ends and every hop; check the cable map"),
    ]  # fmt: skip


def test_a_fresh_port_is_todo_and_unaddressed_pings_are_skipped() -> None:
    spec, plan = sim2()
    fresh = {d: LinkState(d, False, 1500, ()) for d in NETDEVS}
    nodes = {n: replace(healthy_node(plan, n), links=fresh) for n in ("spark-1", "spark-2")}

    findings = findings_for(plan, wiring(spec), rack(plan, nodes=nodes, pings={}))

    statuses = {(f.status, f.check.split()[0]) for f in findings if f.status != "ok"}
    assert statuses == {("todo", "MTU"), ("skip", "jumbo")}
    assert not failed(findings)


def test_nccl_ib_disable_anywhere_fails() -> None:
    spec, plan = sim2()
    node = replace(
        healthy_node(plan, "spark-1"),
        env_hits=[EnvHit("/etc/environment", 3, "1")],
        image_env=["NCCL_IB_DISABLE=1"],
    )
    nodes = {"spark-1": node, "spark-2": healthy_node(plan, "spark-2")}

    findings = findings_for(plan, wiring(spec), rack(plan, nodes=nodes))

    assert not_ok(findings) == [
        ("FAIL", "spark-1", "NCCL_IB_DISABLE", "=1 in /etc/environment:3"),
        ("FAIL", "spark-1", "NCCL_IB_DISABLE",
         "=1 in image localhost/sparkrack/engine-standin:latest"),
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("declared", "live", "status"),
    [(None, "infinity", "ok"), (None, "8388608", "FAIL"), (8388608, "8388608", "ok"),
     (8388608, "infinity", "ok"), (8388608, "65536", "FAIL")],
)  # fmt: skip
def test_memlock(declared: int | None, live: str, status: str) -> None:
    _, plan = sim2()
    node = plan.node("spark-1").model_copy(update={"memlock_limit": MemlockLimit(declared)})

    assert memlock_finding(node, live, "sparkrack").status == status


def test_memlock_before_the_service_user_exists_is_for_up_to_do() -> None:
    _, plan = sim2()
    finding = memlock_finding(plan.node("spark-1"), "", "sparkrack")
    assert (finding.status, finding.check) == ("todo", "memlock sparkrack")


def test_missing_rdma_device_and_unreachable_node() -> None:
    spec, plan = sim2()
    node = replace(healthy_node(plan, "spark-1"), rdma={d: "4: ACTIVE" for d in RDMA[1:]})
    error = "node spark-2 (198.18.0.12): unreachable on port 22: timed out"
    reading = rack(
        plan, nodes={"spark-1": node}, unreachable={"spark-2": error},
        probes={"spark-1": crossed_probe("spark-1")}, pings={},
    )  # fmt: skip

    findings = findings_for(plan, wiring(spec), reading)

    assert ("FAIL", "spark-1", "RDMA rocep1s0f0", "missing from /sys/class/infiniband") in not_ok(
        findings
    )
    assert ("FAIL", "spark-2", "ssh", error) in not_ok(findings)
    assert cable_summary(wiring(spec), reading) is None  # one side unseen: no map guessed


def test_report_golden() -> None:
    findings = [
        Finding("ok", "spark-1", "ssh, OS", "Ubuntu 24.04.3 LTS"),
        Finding("FAIL", "spark-2", "MTU enp1s0f0np0", "MTU 1500, plan 9000", "pulumi up"),
        Finding("todo", "spark-2", "MTU enp1s0f1np1", "MTU 1500, plan 9000", "pulumi up"),
    ]

    assert render_doctor("sim-2", findings, None) == (
        "sparkrack doctor: stack sim-2\n"
        "  status  node     check            observed             next step\n"
        "  ok      spark-1  ssh, OS          Ubuntu 24.04.3 LTS\n"
        "  FAIL    spark-2  MTU enp1s0f0np0  MTU 1500, plan 9000  pulumi up\n"
        "  todo    spark-2  MTU enp1s0f1np1  MTU 1500, plan 9000  pulumi up\n"
        "\n"
        "stack sim-2: NOT ready: 1 ok, 1 FAIL, 1 todo (pulumi up configures them)"
    )

"""What verification finds, one `up` repairs (issue 33): on the package's deployed sim-2, every
fault below at once, each the hand edit an operator's bad day makes to a setting the Plan
holds and none of them a stop of the engine (those have their own tests in test_2_inference),
though one takes the API's container off the host network.
Verification names each on its node and check, a refreshing preview names each resource, one
`up` repairs them all, and afterwards preview is quiet and verification passes.

The faults are spread over both nodes and picked so that none hides another: each check the
table in docs/verification.md says `up` repairs is held here or in a test the table names.
"""

from __future__ import annotations

import shlex
import time
from dataclasses import dataclass

import pytest

from sparkrack.plan import Plan
from sparkrack.plan.exporters import HOST_ROOT, TEXTFILE
from sparkrack.verify.inventory import rdma_file_stale_s
from tests.e2e.conftest import PulumiProject
from tests.e2e.sim_fixtures import as_service, poll, ssh

from .rack import STACK, TIMES, changes, prometheus, verify_report
from .test_1_monitoring import EXPORTER_QUADLET, EXPORTER_UNIT

pytestmark = pytest.mark.e2e


@dataclass(frozen=True)
class Fault:
    node: str
    command: str  # run over SSH as the owner's login (sudo for root's part)
    resource: str  # the resource preview names, without the node prefix
    properties: tuple[str, ...]  # at least these, among what preview says changes
    checks: tuple[str, ...]  # the checks that fail on the node, by function name


def faults(plan: Plan) -> tuple[Fault, ...]:
    return link_faults(plan) + host_faults(plan) + container_faults(plan)


def link_faults(plan: Plan) -> tuple[Fault, ...]:
    head, worker = plan.node("spark-1"), plan.node("spark-2")
    mtu_port, bare, route_port = head.links[0].netdev, head.links[1], worker.links[-1].netdev
    pinged = any(p.from_node == "spark-1" and p.from_netdev == mtu_port for p in plan.jumbo_pings)
    route = f"$(ip -4 -o route show dev {route_port} proto kernel | cut -d' ' -f1)"
    return (
        Fault(
            "spark-2",
            "sudo -n sysctl -qw net.ipv4.conf.all.arp_ignore=0",
            "net.ipv4.conf.all.arp_ignore",
            ("value",),
            ("test_fabric_sysctls",),
        ),
        Fault(
            "spark-1",
            f"sudo -n ip link set dev {mtu_port} mtu 1500",
            mtu_port,
            ("mtu",),
            ("test_link_mtu", *(("test_jumbo_ping",) if pinged else ())),
        ),
        Fault(  # its RoCE v2 GID goes with the address, as on a ConnectX port
            "spark-1",
            f"sudo -n ip addr del {bare.address} dev {bare.netdev}",
            bare.netdev,
            ("addresses",),
            ("test_link_address", "test_rdma_gid_roce_v2"),
        ),
        Fault(
            "spark-2",
            f"sudo -n ip route del {route} dev {route_port}",
            route_port,
            ("routes",),
            ("test_connected_route",),
        ),
    )


def host_faults(plan: Plan) -> tuple[Fault, ...]:
    irq_script = plan.roles.cpu_pinning.irq_script
    return (
        Fault(
            "spark-1",
            "echo IRQBALANCE_BANNED_CPULIST= | sudo -n tee /etc/default/irqbalance >/dev/null",
            "irqbalance-ban",
            ("sha256",),
            ("test_irqbalance_banned", "test_irqbalance_runs_its_ban"),
        ),
        Fault(  # on hardware without NIC IRQs to pin (gb10-sim), only preview can see it
            "spark-2",
            f"sudo -n touch {shlex.quote(irq_script)}",
            "irq-unit",
            ("current",),
            ("test_irq_pin_applied",) if plan.node("spark-2").cpus.nic_irqs != "none" else (),
        ),
        Fault(
            "spark-2",
            "sudo -n sed -i '/^sparkrack:/d' /etc/subuid",
            "service-user",
            ("subuids",),
            ("test_service_user_subids",),
        ),
        Fault(
            "spark-1",
            "sudo -n nft delete table inet sparkrack_ray_fence",
            "ray-fence",
            ("rules",),
            ("test_the_node_fence_is_the_plans",),
        ),
    )


def container_faults(plan: Plan) -> tuple[Fault, ...]:
    reference = shlex.quote(plan.serving.image)
    rebuilt = (  # the engine's image rebuilt on the head under its name, a label added
        f'd=$(mktemp -d) && printf "FROM %s\\nLABEL rebuilt=by-hand\\n" {reference} > "$d"/C && '
        f'podman build -q --pull=never -f "$d"/C -t {reference} "$d" >/dev/null; rm -rf "$d"'
    )
    pid = as_service("podman inspect --format '{{.State.Pid}}' node-exporter")
    compute = plan.node("spark-1").cpus.compute.kernel()
    listen = r"s/--web.listen-address=[0-9.]*:/--web.listen-address=0.0.0.0:/"
    # seed 001: the infiniband collector hung its exporter (the quadlet's line or the unit's)
    collectors = [rf"/^{key}=/ s/$/ --collector.infiniband/" for key in ("Exec", "ExecStart")]
    return (
        Fault(  # named on the head, where it changed, not on the worker that still matches
            "spark-1",
            as_service(rebuilt),
            "engine-image",
            ("image_id",),
            ("test_image_id",),
        ),
        Fault(  # the API's container off the host network: Ray and its clients out of reach
            "spark-1",
            as_service(api_off_host_network()),
            "vllm",
            ("unit_sha256",),
            ("test_container_host_network",),
        ),
        Fault(  # first, as it restarts the exporter the next fault moves
            "spark-1",
            as_service(hung_textfile_collector()),
            "node-exporter",
            ("unit_sha256",),
            ("test_node_exporter_scrape_time",),
        ),
        Fault(  # moved by hand onto the engine's cores
            "spark-1",
            f"sudo -n taskset -apc {compute} $({pid}) >/dev/null",
            "node-exporter",
            ("cpuset",),
            ("test_exporter_cpuset",),
        ),
        Fault(  # listening on every address (the whole LAN's to scrape), a hanging collector added
            "spark-2",
            as_service(f"{edited(listen, *collectors)} {EXPORTER_UNITS}; {EXPORTER_RESTART}"),
            "node-exporter",
            ("unit_sha256",),
            (
                "test_nothing_listens_beyond_the_plan",
                "test_each_service_listens_on_its_planned_address",
                "test_node_exporter_collectors",
            ),
        ),
        Fault(  # its file stays: node-exporter serves the last counters until it is stale
            "spark-2",
            as_service("systemctl --user stop rdma-textfile"),
            "rdma-textfile",
            ("running",),
            ("test_rdma_counter_series",),
        ),
    )


def edited(*expressions: str) -> str:
    """`sed -i` with these expressions, the files to edit to follow."""
    return "sed -i " + " ".join(f"-e {shlex.quote(expression)}" for expression in expressions)


# The exporter's unit (the quadlet's or the plain unit's: the other is not there) and its restart.
EXPORTER_UNITS = f"{EXPORTER_QUADLET} {EXPORTER_UNIT} 2>/dev/null"
EXPORTER_RESTART = "systemctl --user daemon-reload && systemctl --user restart node-exporter"
API_UNIT = "~/.config/systemd/user/vllm.service"
API_QUADLET = "~/.config/containers/systemd/vllm.container"


def api_off_host_network() -> str:
    """The API's unit (the plain unit's line or the quadlet's) edited onto no network at all,
    and restarted without waiting: its stop drains the engine first."""
    sed = edited("s| --network=host | --network=none |", "s|^Network=host$|Network=none|")
    restart = "systemctl --user daemon-reload && systemctl --user restart --no-block vllm"
    return f"{sed} {API_QUADLET} {API_UNIT} 2>/dev/null; {restart}"


# Where the hung collector's pipe is made on the node; nothing ever writes to it.
PIPE_DIR = "/var/tmp/sparkrack-fault"


def hung_textfile_collector() -> str:
    """node-exporter's textfile collector pointed at a directory whose .prom is a pipe nobody
    writes: it blocks opening it, so every scrape hangs (a hung collector, node_exporter#743),
    until the unit is written back. Returns once the exporter runs with the edit."""
    textfile = f"--collector.textfile.directory={TEXTFILE}"
    sed = edited(f"s|{textfile}|--collector.textfile.directory={HOST_ROOT}{PIPE_DIR}|")
    pipe = (
        f"mkdir -p {PIPE_DIR} && {{ [ -p {PIPE_DIR}/hung.prom ] || mkfifo {PIPE_DIR}/hung.prom; }}"
    )
    running = "podman inspect --format '{{.State.Running}} {{.Config.Cmd}}' node-exporter"
    started = f"until {running} 2>/dev/null | grep -q '^true .*{PIPE_DIR}'; do sleep 1; done"
    wait = f"timeout 60 sh -c {shlex.quote(started)}"
    return f"{pipe} && {sed} {EXPORTER_UNITS}; {EXPORTER_RESTART} && {wait}"


def rdma_counters_stale(plan: Plan, node: str) -> None:
    """Wait until Prometheus has `node`'s RDMA counter file older than verification allows."""
    limit = rdma_file_stale_s(plan)
    query = f'time() - node_textfile_mtime_seconds{{node="{node}",file=~".*rdma[.]prom"}}'

    def age() -> str:
        result = (prometheus(plan, "query", query=query) or {}).get("result", [])
        return result[0]["value"][1] if result else "0"

    seen = poll(age, lambda out: float(out) > limit + 5, 120)
    assert float(seen) > limit + 5, seen


def failed_checks(report: dict[str, object]) -> set[tuple[str, str]]:
    """(node, check function) for every failed result of a `verify --json` report."""
    results = report["results"]
    assert isinstance(results, list)
    return {(r["node"], r["id"].split("[")[0]) for r in results if r["outcome"] == "failed"}


def previewed(fault: Fault, drift: dict[str, tuple[str, list[str]]]) -> bool:
    operation, properties = drift.get(f"{fault.node}-{fault.resource}", ("same", []))
    return operation == "update" and set(fault.properties) <= set(properties)


def test_every_fault_up_can_repair_at_once_is_named_then_repaired_by_one_up(
    deploy: PulumiProject, plan: Plan
) -> None:
    injected = faults(plan)
    for fault in injected:
        ssh(STACK, fault.node, fault.command)
    rdma_counters_stale(plan, "spark-2")
    report = verify_report(deploy)
    assert report["exit_status"] != 0
    failed = failed_checks(report)
    unnamed = [
        (f.node, check) for f in injected for check in f.checks if (f.node, check) not in failed
    ]
    assert not unnamed, f"not failed: {unnamed}; failed: {sorted(failed)}"
    assert ("spark-2", "test_image_id") not in failed  # its image is the one the deploy made
    drift = changes(deploy)
    unseen = [f for f in injected if not previewed(f, drift)]
    assert not unseen, f"not in preview: {unseen}; preview: {drift}"
    started = time.monotonic()
    deploy.run("up", "--stack", STACK, "--yes", "--skip-preview")
    TIMES["one up repairing every fault"] = round(time.monotonic() - started, 1)
    assert changes(deploy) == {}
    after = verify_report(deploy)
    assert after["exit_status"] == 0, sorted(failed_checks(after))
    ssh(STACK, "spark-1", as_service(f"rm -rf {PIPE_DIR}"))  # read by nothing once repaired

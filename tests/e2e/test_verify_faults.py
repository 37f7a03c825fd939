"""`sparkrack verify` on a simulated sim-2 copy: all green on a cluster configured as the Plan
says, then one fresh fault at a time, each named by node and check, and repaired before the next.

The cluster is configured by hand to the plan, without the engine (the fabric's ARP settings
and ports, the service user's linger, irqbalance's banned list), so a fault is set and cleared in
seconds; nothing is deployed by `up`, so verify is handed that Plan as a file (`--plan`), as `up`
hands it its own, and is told which roles to hold it to. The faults of deployed containers live
with their roles' e2e: a stopped container and NCCL env edited in a unit in test_inference_sim, an
exporter with --collector.infiniband in test_monitoring_sim.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
import sysconfig
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkrack.config.load import load_stack_file
from sparkrack.plan import Plan, make_plan
from sparkrack.sim import cluster, fabric, nodes
from sparkrack.sim.keys import known_hosts_path, login_key
from sparkrack.sim.topology import SimTopology, rdma_device_for

from .conftest import REPO
from .sim_fixtures import (
    SERVICE_USER,
    report_of,
    require_host_tools,
    run_verify,
    service_user_by_hand,
    shipped_rack,
    ssh,
)

pytestmark = pytest.mark.e2e

STACK = "e2e-verify"
PREFIX = "198.18.6"
ROLES = "fabric,base,cpu_pinning"
IRQBALANCE = "/etc/default/irqbalance"
PLAN_FILE = "plan.json"  # the Plan of the stack file beside it: what verify is handed


@pytest.fixture(scope="module")
def stacks_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """sim-2's stack file, renamed and moved to the test's /24 and SSH material."""
    directory = tmp_path_factory.mktemp("stacks")
    document = yaml.safe_load((REPO / "stacks" / "Pulumi.sim-2.yaml").read_text())
    spec = document["config"]["sparkrack:cluster"]
    spec["ssh"].update(key_path=str(login_key(STACK)), known_hosts=str(known_hosts_path(STACK)))
    for node in spec["nodes"]:
        node["address"] = node["address"].replace("198.18.0.", f"{PREFIX}.")
    (directory / f"Pulumi.{STACK}.yaml").write_text(yaml.safe_dump(document))
    plan = make_plan(load_stack_file(STACK, directory))
    (directory / PLAN_FILE).write_text(plan.model_dump_json())
    return directory


@pytest.fixture(scope="module")
def plan(stacks_dir: Path) -> Plan:
    return Plan.model_validate_json((stacks_dir / PLAN_FILE).read_text())


@pytest.fixture(scope="module")
def sim(plan: Plan) -> Iterator[SimTopology]:
    require_host_tools()
    topology = shipped_rack("sim-2", STACK, PREFIX)
    assert cluster.up(topology, print).healthy
    configure(plan)
    yield topology
    cluster.down(topology, print)


def configure(plan: Plan, only: set[str] | None = None) -> None:
    """What the roles do, by hand: ARP settings, ports in the seed's order, linger, irqbalance's
    bans (and irqbalance started on them)."""
    for node in plan.nodes:
        lines = [f"sysctl -q -w {key}={value}" for key, value in node.sysctls.items()]
        for link in node.links:
            if only is not None and f"{node.name}:{link.netdev}" not in only:
                continue
            port = shlex.quote(link.netdev)
            lines += [f"ip link set {port} up", f"ip link set {port} mtu {link.mtu}"]
            if link.address:
                lines.append(f"ip addr replace {link.address} dev {port}")
        lines += service_user_by_hand(plan)
        banned = f"IRQBALANCE_BANNED_CPULIST={node.cpus.irqbalance_banned.kernel()}"
        lines.append(f"echo {shlex.quote(banned)} > {IRQBALANCE}")
        lines.append("systemctl restart irqbalance")  # it reads its ban only when it starts
        ssh(STACK, node.name, "sudo -n sh -c " + shlex.quote("; ".join(lines)))


def verify(stacks_dir: Path) -> dict[str, Any]:
    return report_of(
        run_verify(None, "--plan", str(stacks_dir / PLAN_FILE), "--json", "--roles", ROLES)
    )


def failing(report: dict[str, Any]) -> set[tuple[str, str]]:
    return {(r["node"], r["id"]) for r in report["results"] if r["outcome"] == "failed"}


def test_a_cluster_as_planned_passes(sim: SimTopology, stacks_dir: Path) -> None:
    report = verify(stacks_dir)
    assert report["exit_status"] == 0, failing(report)
    outcomes = {r["outcome"] for r in report["results"] if r["category"] == "fabric"}
    assert outcomes == {"passed"}


def installed_sparkrack(root: Path) -> Path:
    """A virtualenv with sparkrack installed from its wheel, not editable: the package's files are
    its own copy, and the repository is nowhere on its path. Its dependencies come from the
    project's virtualenv through a path line (which, unlike a site directory, runs none of that
    one's .pth files: its editable finder stays out)."""
    source = root / "source"
    for part in ("infra/sparkrack", "roles"):
        shutil.copytree(REPO / part, source / part, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    wheels = root / "wheels"
    pip = [str(REPO / ".venv/bin/pip"), "wheel", "-q", "--no-deps", "--no-build-isolation"]
    run([*pip, "-w", str(wheels), str(source)])  # the venv's setuptools (test extras): offline
    venv = root / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    [site] = (venv / "lib").glob("python3*/site-packages")
    (site / "sparkrack-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    [wheel] = wheels.glob("sparkrack-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(site)
    return venv / "bin" / "python"


def run(command: list[str]) -> None:
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, f"{command[0]}: {done.stderr[-2000:]}"


def test_an_installed_sparkrack_verifies_without_the_repository(
    sim: SimTopology, stacks_dir: Path, tmp_path: Path
) -> None:
    python = installed_sparkrack(tmp_path)
    where = subprocess.run(
        [str(python), "-c", "import sparkrack, roles; print(sparkrack.__file__, roles.__file__)"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert all(path.startswith(str(python.parents[1])) for path in where), where
    command = [str(python), "-m", "sparkrack.cli", "verify", "--plan", "-"]
    command += ["--json", "--roles", ROLES]
    plan_json = (stacks_dir / PLAN_FILE).read_text()
    done = subprocess.run(
        command, input=plan_json, cwd=tmp_path, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads(done.stdout)
    checks = {r["check"] for r in report["results"] if r["outcome"] == "passed"}
    assert {"test_link_mtu", "test_jumbo_ping", "test_rdma_gid_roce_v2"} <= checks


def verify_with_fault(stacks_dir: Path, plan: Plan, node: str, fault: str) -> dict[str, Any]:
    """Verify with `fault` run on the node, then put the node back as planned."""
    ssh(STACK, node, fault)
    try:
        report = verify(stacks_dir)
    finally:
        configure(plan)
    assert report["exit_status"] == 1
    return report


def test_wrong_mtu_is_named(sim: SimTopology, stacks_dir: Path, plan: Plan) -> None:
    report = verify_with_fault(
        stacks_dir, plan, "spark-2", "sudo -n ip link set enp1s0f0np0 mtu 1500"
    )
    assert ("spark-2", "test_link_mtu[spark-2-enp1s0f0np0]") in failing(report)
    detail = next(
        r["detail"] for r in report["results"] if r["id"].endswith("mtu[spark-2-enp1s0f0np0]")
    )
    assert detail == "enp1s0f0np0 MTU 1500, want 9000"


def test_a_fabric_port_down_is_named_with_its_rdma_port(
    sim: SimTopology, stacks_dir: Path, plan: Plan
) -> None:
    """The link down, its RDMA port follows (as an mlx5 port does): DOWN, no RoCE v2 GID for
    NCCL's index. The checks name spark-2 and that port; at the cable's other end only the
    port that lost its carrier fails, as a real peer's would."""
    fault = "sudo -n ip link set enp1s0f0np0 down && sleep 3"  # the port follows within 1 s
    report = verify_with_fault(stacks_dir, plan, "spark-2", fault)
    assert {
        ("spark-2", "test_link_up[spark-2-enp1s0f0np0]"),
        ("spark-2", "test_rdma_port_active[spark-2-rocep1s0f0]"),
        ("spark-2", "test_rdma_gid_roce_v2[spark-2-rocep1s0f0]"),
    } <= failing(report)
    [peer] = [
        (c.a_node, c.a_port_netdev) if c.b_node == "spark-2" else (c.b_node, c.b_port_netdev)
        for c in sim.cables
        if ("spark-2", "enp1s0f0np0") in ((c.a_node, c.a_port_netdev), (c.b_node, c.b_port_netdev))
    ]
    # The RDMA write across that cable half (run from its first node's end) finds no path.
    assert (peer[0], f"test_rdma_write_bandwidth[{peer[0]}-{peer[1]}]") in failing(report)
    ports = {"spark-2": ("enp1s0f0np0", "rocep1s0f0"), peer[0]: (peer[1], rdma_device_for(peer[1]))}
    for node, check in failing(report):
        assert any(f"{node}-{port}]" in check for port in ports[node]), (node, check)
    detail = next(
        r["detail"]
        for r in report["results"]
        if r["id"] == "test_rdma_port_active[spark-2-rocep1s0f0]"
    )
    assert detail == "rocep1s0f0 port 1 is '1: DOWN', want ACTIVE"
    time.sleep(3)  # configure() put the link back: the port follows again
    assert verify(stacks_dir)["exit_status"] == 0


def rewire(topology: SimTopology, pairs: list[tuple[str, str, str, str]]) -> None:
    """Pull the node ends of these cables and plug them as (node, port) <-> (node, port)."""
    pids = {node.name: nodes.node_pid(topology.stack, node.name) for node in topology.nodes}
    for a_node, a_port, b_node, b_port in pairs:
        for node, port in ((a_node, a_port), (b_node, b_port)):
            subprocess.run([*fabric.ip_in(pids[node]), "link", "del", port], check=False)
    for a_node, a_port, b_node, b_port in pairs:
        pair = fabric.VethPair(fabric.VethEnd(a_node, a_port), fabric.VethEnd(b_node, b_port))
        fabric.create_pair(pair, pids[a_node], pids[b_node], topology.stack)


def test_swapped_cable_is_named(sim: SimTopology, stacks_dir: Path, plan: Plan) -> None:
    """spark-1's two port-0/port-1 halves swapped at spark-2: every ping still answers."""
    swapped = [
        ("spark-1", "enp1s0f0np0", "spark-2", "enp1s0f0np0"),
        ("spark-1", "enp1s0f1np1", "spark-2", "enp1s0f1np1"),
    ]
    # Put back by hand: `sim up` cannot yet re-wire two cables crossed into each other (it
    # deletes a pair, whose peer goes with it, then tries to delete that peer again).
    planned = [
        ("spark-1", "enp1s0f0np0", "spark-2", "enp1s0f1np1"),
        ("spark-1", "enp1s0f1np1", "spark-2", "enp1s0f0np0"),
    ]
    rewire(sim, swapped)
    touched = {f"{n}:{p}" for a, b, c, d in swapped for n, p in ((a, b), (c, d))}
    configure(plan, only=touched)
    try:
        report = verify(stacks_dir)
    finally:
        rewire(sim, planned)
        assert not cluster.status(sim).missing_links
        configure(plan, only=touched)
    assert report["exit_status"] == 1
    assert ("spark-1", "test_cable_peer[spark-1-enp1s0f0np0]") in failing(report)
    detail = next(
        r["detail"] for r in report["results"] if r["id"] == "test_cable_peer[spark-1-enp1s0f0np0]"
    )
    assert detail == (
        "enp1s0f0np0 reaches spark-2:enp1s0f0np0, but the cable map says spark-2:enp1s0f1np1"
    )


def test_lost_linger_is_named(sim: SimTopology, stacks_dir: Path, plan: Plan) -> None:
    """Without linger the service user's manager stops (no login of its own keeps it, as on a
    real rack), and with it the memlock its containers would inherit: both are named."""
    report = verify_with_fault(
        stacks_dir, plan, "spark-2", f"sudo -n loginctl disable-linger {SERVICE_USER}"
    )
    assert failing(report) == {
        ("spark-2", "test_service_user_linger[spark-2]"),
        ("spark-2", "test_user_manager_memlock[spark-2]"),
    }


def test_irqbalance_on_compute_cores_is_named(
    sim: SimTopology, stacks_dir: Path, plan: Plan
) -> None:
    fault = f"echo IRQBALANCE_BANNED_CPULIST= | sudo -n tee {IRQBALANCE}"
    report = verify_with_fault(stacks_dir, plan, "spark-1", fault)
    # The file is wrong, and irqbalance (not restarted) no longer runs what it says.
    assert failing(report) == {
        ("spark-1", "test_irqbalance_banned[spark-1]"),
        ("spark-1", "test_irqbalance_runs_its_ban[spark-1]"),
    }


def test_a_ban_irqbalance_was_not_restarted_for_is_named(
    sim: SimTopology, stacks_dir: Path, plan: Plan
) -> None:
    """Seed 000's trap: the file says the right thing, the running irqbalance does not."""
    report = verify_with_fault(stacks_dir, plan, "spark-2", f"sudo -n touch {IRQBALANCE}")
    assert failing(report) == {("spark-2", "test_irqbalance_runs_its_ban[spark-2]")}

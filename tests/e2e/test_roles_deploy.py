"""The roles through the real engine on a private copy of sim-2 (issue 5, acceptance 1-4).

Module order matters: up from fresh nodes, idempotence, a refreshing preview with no changes,
hand-made drift shown on exactly the right resource, repair. The rack is sim-2's, renamed and
moved to its own /24 so a developer's sim-2 is never touched.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from sparkrack.sim import cluster
from sparkrack.sim.keys import known_hosts_path, login_key
from sparkrack.sim.topology import SimTopology

from .conftest import REPO, SIM_PASSPHRASE, PulumiProject, shipped_cluster
from .sim_fixtures import require_host_tools, shipped_rack, ssh

pytestmark = pytest.mark.e2e

STACK = "e2e-roles"
PREFIX = "198.18.5"
TIMES: dict[str, float] = {}


@pytest.fixture(scope="module")
def sim() -> Iterator[SimTopology]:
    require_host_tools()
    topology = shipped_rack("sim-2", STACK, PREFIX)
    assert cluster.up(topology, print).healthy
    yield topology
    cluster.down(topology, print)
    print(f"wall times on {STACK}: {TIMES}")


def private_cluster() -> object:
    """sim-2's cluster, on our /24 and with our rack's SSH key and pinned host keys."""
    config = json.loads(json.dumps(shipped_cluster("sim-2")))
    for node in config["nodes"]:
        node["address"] = f"{PREFIX}.{node['address'].split('.')[3]}"
    config["ssh"]["key_path"] = str(login_key(STACK))
    config["ssh"]["known_hosts"] = str(known_hosts_path(STACK))
    return config


@pytest.fixture(scope="module")
def project(sim: SimTopology, tmp_path_factory: pytest.TempPathFactory) -> PulumiProject:
    base = tmp_path_factory.mktemp("roles")
    root = base / "project"
    root.mkdir()
    manifest = yaml.safe_load((REPO / "Pulumi.yaml").read_text())
    manifest["runtime"]["options"]["virtualenv"] = str(REPO / ".venv")
    (root / "Pulumi.yaml").write_text(yaml.safe_dump(manifest))
    (root / "infra").symlink_to(REPO / "infra")
    (root / "stacks").mkdir()
    (base / "state").mkdir()
    env = dict(os.environ)
    env.update(
        PULUMI_BACKEND_URL=f"file://{base / 'state'}",
        PULUMI_HOME=str(base / "pulumi-home"),
        PULUMI_CONFIG_PASSPHRASE=SIM_PASSPHRASE,
        PULUMI_SKIP_UPDATE_CHECK="true",
        PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION="true",
        PULUMI_DISABLE_REGISTRY_RESOLVE="true",
        PATH=f"{REPO / '.venv' / 'bin'}{os.pathsep}{env['PATH']}",
    )
    project = PulumiProject(root=root, env=env)
    project.write_stack(STACK, private_cluster())
    project.run("stack", "init", STACK)
    return project


def timed(name: str, project: PulumiProject, *args: str) -> None:
    started = time.monotonic()
    project.run(*args)
    TIMES[name] = round(time.monotonic() - started, 1)


def planned_changes(project: PulumiProject) -> dict[str, tuple[str, list[str]]]:
    """resource name -> (operation, changed properties) for every step that is not a no-op."""
    streaming = {"PULUMI_ENABLE_STREAMING_JSON_PREVIEW": "true"}
    done = project.run("preview", "--stack", STACK, "--refresh", "--json", extra_env=streaming)
    changes = {}
    for line in done.stdout.splitlines():
        meta = json.loads(line).get("resourcePreEvent", {}).get("metadata")
        if meta and meta["op"] not in ("same", "refresh", "read"):
            changes[meta["urn"].rsplit("::", 1)[1]] = (meta["op"], sorted(meta.get("diffs") or []))
    return changes


def link(node: str, netdev: str) -> tuple[int, bool, list[str]]:
    found = json.loads(ssh(STACK, node, f"ip -j addr show dev {netdev}"))[0]
    addresses = [
        f"{a['local']}/{a['prefixlen']}" for a in found["addr_info"] if a["scope"] == "global"
    ]
    return found["mtu"], "UP" in found["flags"], addresses


def test_up_converges_from_fresh_nodes(sim: SimTopology, project: PulumiProject) -> None:
    timed("up", project, "up", "--stack", STACK, "--yes")
    assert link("spark-1", "enp1s0f0np0") == (9000, True, ["198.19.0.1/24"])
    assert link("spark-2", "enP2p1s0f1np1") == (9000, True, ["198.19.1.2/24"])
    assert f"{PREFIX}.12 spark-2" in ssh(STACK, "spark-1", "cat /etc/hosts")
    assert ssh(STACK, "spark-2", "loginctl show-user -p Linger --value sparkrack") == "yes"
    assert ssh(STACK, "spark-1", "systemctl is-active sparkrack-irq-affinity") == "active"
    assert "IRQBALANCE_BANNED_CPULIST=1" in ssh(STACK, "spark-1", "cat /etc/default/irqbalance")
    key = "-i ~/.ssh/sparkrack_cluster_ed25519 -o BatchMode=yes"
    assert ssh(STACK, "spark-1", f"ssh {key} 198.19.0.2 hostname") == "spark-2"


def test_second_up_changes_nothing(project: PulumiProject) -> None:
    timed("second up", project, "up", "--stack", STACK, "--yes")
    history = json.loads(project.run("stack", "history", "--stack", STACK, "--json").stdout)
    assert set(history[0]["resourceChanges"]) == {"same"}, history[0]["resourceChanges"]


def test_preview_refresh_expects_no_changes(project: PulumiProject) -> None:
    timed(
        "preview --refresh",
        project,
        "preview",
        "--stack",
        STACK,
        "--refresh",
        "--expect-no-changes",
    )


HAND_MADE_DRIFT = {
    "spark-2": [
        "sudo ip link set dev enp1s0f0np0 mtu 1500",
        "echo '# edited' >> ~/.config/containers/storage.conf",
        "sudo loginctl disable-linger sparkrack",
    ],
    "spark-1": [
        "sudo ip addr del 198.19.2.1/24 dev enp1s0f1np1",
        "sudo systemctl stop sparkrack-irq-affinity",
    ],
}


def test_hand_made_drift_shows_on_exactly_that_resource(project: PulumiProject) -> None:
    for node, commands in HAND_MADE_DRIFT.items():
        ssh(STACK, node, " && ".join(commands))
    assert planned_changes(project) == {
        "spark-2-enp1s0f0np0": ("update", ["mtu"]),
        "spark-2-storage-conf": ("update", ["sha256"]),
        "spark-2-service-user": ("update", ["linger"]),
        "spark-1-enp1s0f1np1": ("update", ["addresses"]),
        "spark-1-irq-unit": ("update", ["active"]),
    }


def test_up_repairs_the_drift(project: PulumiProject) -> None:
    project.run("up", "--stack", STACK, "--yes")
    assert link("spark-2", "enp1s0f0np0") == (9000, True, ["198.19.2.2/24"])  # crossed
    assert link("spark-1", "enp1s0f1np1") == (9000, True, ["198.19.2.1/24"])
    assert ssh(STACK, "spark-2", "loginctl show-user -p Linger --value sparkrack") == "yes"
    project.run("preview", "--stack", STACK, "--refresh", "--expect-no-changes")


def test_no_temporary_file_is_left_on_a_node(sim: SimTopology) -> None:
    for node in sim.nodes:
        left = ssh(STACK, node.name, "sudo find /etc /home /usr/local -name '*.sparkrack-tmp.*'")
        assert left == "", node.name


def test_destroy_leaves_the_fabric_as_the_simulator_built_it(project: PulumiProject) -> None:
    project.run("destroy", "--stack", STACK, "--yes")
    for node in ("spark-1", "spark-2"):
        assert link(node, "enp1s0f0np0") == (1500, False, []), node
        assert ssh(STACK, node, "ls /etc/systemd/network/") == "", node
        assert "sparkrack" not in ssh(STACK, node, "cat /etc/hosts"), node
        assert ssh(STACK, node, "systemctl is-enabled systemd-networkd", check=False) == "disabled"
    assert not Path(ssh(STACK, "spark-1", "ls ~/.ssh")).name.startswith("sparkrack")

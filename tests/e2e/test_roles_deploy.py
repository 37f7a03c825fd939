"""Issue 5's roles through the real engine on a private copy of sim-2 (acceptance 1-7).

The project runs programs/roles: the roles as infra/__main__.py wires them, without the inference
role and verification that follow them there (their own e2e tests cover those). One rack serves
the whole module, so the order matters and each test starts where the one before left the nodes:

1-3. up from fresh nodes, a second up with no changes, a refreshing preview with no changes;
4.   hand-made drift shown on exactly the right resource, then repaired; an image built on the
     head and shipped to the other node, a container per node (programs/containers, its own
     project), and its removal shown and repaired;
5.   destroy (containers, then roles) leaves each node as the simulator built it, compared with a
     snapshot taken before the first up;
6.   an up interrupted with SIGINT halfway through that fresh deploy, then run again, converges;
7.   a stopped node, under the project's `refresh: always`: the error names it, the other node
     converges.

The rack is sim-2's, renamed and moved to its own /24 so a developer's sim-2 is never touched.
"""

from __future__ import annotations

import difflib
import json
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkrack.sim import cluster, nodes
from sparkrack.sim.keys import known_hosts_path, login_key, node_ssh_dir
from sparkrack.sim.node_image import LOGIN_USER
from sparkrack.sim.topology import SimTopology
from sparkrack.stackspec.roles import ServiceUserSpec
from sparkrack.text.commands import podman_exec

from .conftest import PulumiProject
from .programs import PROGRAMS, program_project
from .sim_fixtures import (
    SERVICE_HOME,
    SERVICE_USER,
    as_service,
    fresh,
    memlock_dropin_of,
    private_cluster,
    shipped_rack,
    sparkrack_verify,
    ssh,
)
from .sim_fixtures import planned_changes as changes_in

pytestmark = pytest.mark.e2e

STACK = "e2e-roles"
PROGRAM = PROGRAMS / "roles"  # the project fixture's program: these roles, no inference
PREFIX = "198.18.5"
TIMES: dict[str, float] = {}
SUBIDS = ServiceUserSpec().subuids[0]  # the service user's, beside the owner's 100000:65536
TEMP_FILES = "sudo find /etc /home /usr/local -name '*.sparkrack-tmp.*'"


@pytest.fixture(scope="module")
def sim() -> Iterator[SimTopology]:
    yield from fresh(shipped_rack("sim-2", STACK, PREFIX))
    print(f"wall times on {STACK}: {TIMES}")


# What step 5 compares: each node as the simulator built it. Paths are those any role writes to;
# a listing (path, mode, owner) and a hash of each file, so a left-behind empty directory shows.
# The service user `up` made is kept by a destroy, with its home (issue 31): its account and
# subordinate ids are listed apart, and what the roles wrote into its home is read after.
SNAPSHOT = {
    "packages": "dpkg-query -W -f '${Package}=${Version}\\n' | sort",
    "hosts": "cat /etc/hosts",
    "tree": (
        "sudo find /etc/systemd /etc/sysctl.d /etc/default /usr/local"
        " -printf '%p %M %u:%g\\n' 2>/dev/null | sort"
    ),
    "content": (
        "sudo find /etc/systemd /etc/sysctl.d /etc/default /usr/local /etc/hosts"
        " -type f -exec sha256sum {} + | sort -k2"
    ),
    "accounts": "getent passwd | cut -d: -f1,6 | sort; sort /etc/subuid; sort /etc/subgid",
    "linger": "ls -d /var/lib/systemd/linger /var/lib/systemd/linger/* 2>/dev/null || true",
    "links": "ip -br link | sed 's/@[^ ]*//'; ip -br addr | sed 's/@[^ ]*//'",
    "enabled": "systemctl list-unit-files --state=enabled --no-legend | sort",
}


def snapshot(node: str) -> dict[str, str]:
    return {name: ssh(STACK, node, command) for name, command in SNAPSHOT.items()}


@pytest.fixture(scope="module")
def as_built(sim: SimTopology) -> dict[str, dict[str, str]]:
    """Each node right after `sim up`, before anything is deployed."""
    return {node.name: snapshot(node.name) for node in sim.nodes}


@pytest.fixture(scope="module")
def deploy(
    project: PulumiProject, sim: SimTopology, as_built: dict[str, dict[str, str]]
) -> PulumiProject:
    """The e2e project with our stack in it; requested after the snapshot of the fresh nodes."""
    project.write_stack(STACK, private_cluster("sim-2", STACK, PREFIX))
    project.run("stack", "init", STACK)
    return project


def timed(name: str, project: PulumiProject, *args: str) -> None:
    started = time.monotonic()
    project.run(*args)
    TIMES[name] = round(time.monotonic() - started, 1)


def planned_changes(project: PulumiProject, stack: str) -> dict[str, tuple[str, list[str]]]:
    """resource name -> (operation, changed properties) for every step that is not a no-op."""
    streaming = {"PULUMI_ENABLE_STREAMING_JSON_PREVIEW": "true"}
    done = project.run("preview", "--stack", stack, "--refresh", "--json", extra_env=streaming)
    return changes_in(done.stdout)


def link(node: str, netdev: str) -> tuple[int, bool, list[str]]:
    found = json.loads(ssh(STACK, node, f"ip -j addr show dev {netdev}"))[0]
    addresses = [
        f"{a['local']}/{a['prefixlen']}" for a in found["addr_info"] if a["scope"] == "global"
    ]
    return found["mtu"], "UP" in found["flags"], addresses


def assert_converged(node: str) -> None:
    """What the roles make on a node, read over SSH (its own roles; SSH trust aside)."""
    other = {"spark-1": "spark-2", "spark-2": "spark-1"}[node]
    assert link(node, "enp1s0f0np0")[:2] == (9000, True), node
    assert link(node, "enP2p1s0f1np1")[:2] == (9000, True), node
    assert f"{PREFIX}.1{other[-1]} {other}" in ssh(STACK, node, "cat /etc/hosts"), node
    assert ssh(STACK, node, f"loginctl show-user -p Linger --value {SERVICE_USER}") == "yes"
    assert ssh(STACK, node, "systemctl is-active sparkrack-irq-affinity") == "active", node
    configs = ssh(STACK, node, as_service("ls ~/.config/containers")).split()
    assert configs == ["containers.conf", "registries.conf", "storage.conf"], node


def test_up_converges_from_fresh_nodes(sim: SimTopology, deploy: PulumiProject) -> None:
    timed("up", deploy, "up", "--stack", STACK, "--yes")
    assert link("spark-1", "enp1s0f0np0") == (9000, True, ["198.19.0.1/24"])
    assert link("spark-2", "enP2p1s0f1np1") == (9000, True, ["198.19.1.2/24"])
    assert f"{PREFIX}.12 spark-2" in ssh(STACK, "spark-1", "cat /etc/hosts")
    for node in ("spark-1", "spark-2"):
        assert_converged(node)
    assert "IRQBALANCE_BANNED_CPULIST=1" in ssh(STACK, "spark-1", "cat /etc/default/irqbalance")
    key = "-i ~/.ssh/sparkrack_cluster_ed25519 -o BatchMode=yes"
    assert ssh(STACK, "spark-1", as_service(f"ssh {key} 198.19.0.2 hostname")) == "spark-2"


def test_second_up_changes_nothing(deploy: PulumiProject) -> None:
    timed("second up", deploy, "up", "--stack", STACK, "--yes")
    history = json.loads(deploy.run("stack", "history", "--stack", STACK, "--json").stdout)
    assert set(history[0]["resourceChanges"]) == {"same"}, history[0]["resourceChanges"]


def test_preview_refresh_expects_no_changes(deploy: PulumiProject) -> None:
    timed(
        "preview --refresh",
        deploy,
        "preview",
        "--stack",
        STACK,
        "--refresh",
        "--expect-no-changes",
    )


HAND_MADE_DRIFT = {
    "spark-2": [
        "sudo ip link set dev enp1s0f0np0 mtu 1500",
        as_service("echo '# edited' >> ~/.config/containers/storage.conf"),
        f"sudo loginctl disable-linger {SERVICE_USER}",
        "sudo touch /etc/default/irqbalance",  # irqbalance runs an older file than the one there
    ],
    "spark-1": [
        "sudo ip addr del 198.19.2.1/24 dev enp1s0f1np1",
        "sudo ip route del 198.19.0.0/24 dev enp1s0f0np0",  # its address kept
        "sudo systemctl stop sparkrack-irq-affinity",
        # Its manager restarted without the drop-in: back at the node's default memlock.
        f'sudo rm "{memlock_dropin_of(SERVICE_USER)}" && sudo systemctl daemon-reload',
        f"sudo systemctl restart user@$(id -u {SERVICE_USER}).service",
    ],
}


def test_hand_made_drift_shows_on_exactly_that_resource(deploy: PulumiProject) -> None:
    for node, commands in HAND_MADE_DRIFT.items():
        ssh(STACK, node, " && ".join(commands))
    assert planned_changes(deploy, STACK) == {
        "spark-2-enp1s0f0np0": ("update", ["mtu"]),
        "spark-2-storage-conf": ("update", ["sha256"]),
        "spark-2-service-user": ("update", ["linger"]),
        "spark-2-irqbalance": ("update", ["current"]),
        "spark-1-enp1s0f1np1": ("update", ["addresses", "routes"]),
        "spark-1-enp1s0f0np0": ("update", ["routes"]),
        "spark-1-irq-unit": ("update", ["active"]),
        "spark-1-service-user": ("update", ["memlock"]),
    }


def test_up_repairs_the_drift(deploy: PulumiProject) -> None:
    deploy.run("up", "--stack", STACK, "--yes")
    assert link("spark-2", "enp1s0f0np0") == (9000, True, ["198.19.2.2/24"])  # crossed
    assert link("spark-1", "enp1s0f1np1") == (9000, True, ["198.19.2.1/24"])
    route = ssh(STACK, "spark-1", "ip -o route show dev enp1s0f0np0 198.19.0.0/24")
    assert route.startswith("198.19.0.0/24 proto kernel scope link src 198.19.0.1"), route
    assert ssh(STACK, "spark-2", f"loginctl show-user -p Linger --value {SERVICE_USER}") == "yes"
    # The drop-in back and the manager restarted on it: its containers would inherit this.
    manager = ssh(STACK, "spark-1", f"systemctl show -P MainPID user@$(id -u {SERVICE_USER})")
    limits = ssh(STACK, "spark-1", f"sudo -n grep 'locked memory' /proc/{manager}/limits")
    assert limits.split()[3:5] == ["8388608", "8388608"], limits
    deploy.run("preview", "--stack", STACK, "--refresh", "--expect-no-changes")


def started_at(node: str, unit: str) -> str:
    return ssh(STACK, node, f"systemctl show -P ActiveEnterTimestampMonotonic {unit}")


def test_a_changed_cpu_split_is_in_force_after_one_up_without_a_reboot(
    deploy: PulumiProject,
) -> None:
    """Seed 000: a ban and a mask written but never applied. The cores swap on spark-1; one `up`
    restarts irqbalance on the new ban and re-runs the pin with the new mask."""
    units = ("irqbalance", "sparkrack-irq-affinity")
    before = {unit: started_at("spark-1", unit) for unit in units}

    def swap(cluster: Any) -> None:
        cluster["nodes"][0]["overrides"] = {"housekeeping_cpus": "1", "compute_cpus": "0"}

    deploy.edit_cluster(STACK, swap)
    deploy.run("up", "--stack", STACK, "--yes")

    assert "IRQBALANCE_BANNED_CPULIST=0" in ssh(STACK, "spark-1", "cat /etc/default/irqbalance")
    pin = ssh(STACK, "spark-1", "systemctl show -P ExecStart sparkrack-irq-affinity")
    assert "/proc 2 " in pin or pin.endswith("/proc 2"), pin  # mask 2: core 1, housekeeping now
    for unit in units:
        assert ssh(STACK, "spark-1", f"systemctl is-active {unit}") == "active", unit
        assert int(started_at("spark-1", unit)) > int(before[unit]), f"{unit} was not restarted"
    verify = sparkrack_verify(deploy.env, STACK, deploy.root / "stacks", "--roles", ROLES)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    deploy.run("preview", "--stack", STACK, "--refresh", "--expect-no-changes")


# --- Image and Container, on the nodes the roles made (programs/containers) -------------------

APPS = "e2e-roles-apps"
APP, REFERENCE = "e2e-app", "localhost/sparkrack/e2e-app:1"
# The container's env and last command argument: what a unit file written raw would mangle.
QUOTING = """a "b" 'c' %h %% $HOME ${X} $$ \\ ; # = end"""
BASE_IMAGE = "localhost/sparkrack/e2e-base:1"
# The origin's base: the node's own busybox in an otherwise empty root, imported by the service
# user on the head (no registry is reachable). The program builds the app image FROM it there.
IMPORT_BASE = (
    "set -e; rm -rf ~/e2e-base && mkdir -p ~/e2e-base/bin && cp /bin/busybox ~/e2e-base/bin/ && "
    "tar -C ~/e2e-base -c . | podman import -q - " + BASE_IMAGE + " >/dev/null && rm -rf ~/e2e-base"
)


@pytest.fixture(scope="module")
def apps(deploy: PulumiProject, tmp_path_factory: pytest.TempPathFactory) -> PulumiProject:
    ssh(STACK, "spark-1", as_service(IMPORT_BASE))
    nodes_config = [
        {"name": "spark-1", "address": f"{PREFIX}.11", "ship_to": ""},
        {"name": "spark-2", "address": f"{PREFIX}.12", "ship_to": "198.19.0.2"},  # over a cable
    ]
    config = {
        "e2e:nodes": json.dumps(nodes_config),
        "e2e:head": "spark-1",
        "e2e:user": LOGIN_USER,
        "e2e:serviceUser": SERVICE_USER,
        "e2e:home": SERVICE_HOME,
        "e2e:keyPath": str(login_key(STACK)),
        "e2e:knownHosts": str(known_hosts_path(STACK)),
        "e2e:base": BASE_IMAGE,
        "e2e:trustKey": "sparkrack_cluster_ed25519",
        "e2e:quoting": QUOTING,
    }
    root = tmp_path_factory.mktemp("apps") / "project"
    return program_project(root, "containers", APPS, config)


def image_id(node: str) -> str:
    return ssh(STACK, node, as_service(f"podman image inspect --format '{{{{.Id}}}}' {REFERENCE}"))


def test_image_is_shipped_and_the_container_runs_on_every_node(apps: PulumiProject) -> None:
    apps.run("up", "--stack", APPS, "--yes")
    built = image_id("spark-1")
    assert built and image_id("spark-2") == built
    for node in ("spark-1", "spark-2"):
        inspect = f"podman container inspect --format '{{{{.State.Running}}}} {{{{.Image}}}}' {APP}"
        assert ssh(STACK, node, as_service(inspect)) == f"true {built}", node
        env = ssh(STACK, node, as_service(podman_exec(APP, ["/bin/busybox", "env"])))
        assert f"SPARKRACK_NODE={node}" in env.splitlines(), node
        # Quotes, specifiers and `$` through the real systemd and Quadlet, unchanged.
        assert f"SPARKRACK_QUOTING={QUOTING}" in env.splitlines(), env
        arg0 = podman_exec(APP, ["/bin/busybox", "cat", "/arg0"])
        assert ssh(STACK, node, as_service(arg0)) == QUOTING
        # An SSH session may lock less than the container (as on DGX OS), so the runtime refuses
        # an exec straight from it: why podman_exec asks the user's manager to start one.
        direct = as_service(f"podman exec {APP} /bin/busybox true 2>&1")
        refused = ssh(STACK, node, direct, check=False)
        assert "error setting rlimit type 8" in refused, refused
        assert ssh(STACK, node, as_service(f"systemctl --user is-active {APP}")) == "active"
    apps.run("preview", "--stack", APPS, "--refresh", "--expect-no-changes")


def test_a_removed_container_shows_on_that_node_and_up_repairs_it(apps: PulumiProject) -> None:
    ssh(STACK, "spark-2", as_service(f"podman rm --force {APP} >/dev/null"))
    assert planned_changes(apps, APPS) == {
        "spark-2-container": ("update", ["cpuset", "env", "image_id", "running", "ulimits"])
    }
    apps.run("up", "--stack", APPS, "--yes", "--refresh")
    running = f"podman container inspect --format '{{{{.State.Running}}}}' {APP}"
    assert ssh(STACK, "spark-2", as_service(running)) == "true"
    apps.run("preview", "--stack", APPS, "--refresh", "--expect-no-changes")


def test_no_temporary_file_is_left_on_a_node(sim: SimTopology) -> None:
    for node in sim.nodes:
        assert ssh(STACK, node.name, TEMP_FILES) == "", node.name


# --- 5: destroy -----------------------------------------------------------------------------


def test_destroy_leaves_each_node_as_the_simulator_built_it(
    sim: SimTopology,
    deploy: PulumiProject,
    apps: PulumiProject,
    as_built: dict[str, dict[str, str]],
) -> None:
    apps.run("destroy", "--stack", APPS, "--yes")
    ssh(STACK, "spark-1", as_service(f"podman rmi {BASE_IMAGE} >/dev/null"))  # the test's import
    timed("destroy", deploy, "destroy", "--stack", STACK, "--yes")
    for node in sim.nodes:
        now, was = snapshot(node.name), as_built[node.name]
        differs = {
            key: changed_lines(was[key], now[key]) for key in SNAPSHOT if now[key] != was[key]
        }
        kept = [f"+{SERVICE_USER}:{SERVICE_HOME}", *[f"+{SERVICE_USER}:{SUBIDS}"] * 2]
        assert differs == {"accounts": kept}, node.name
        # The kept home holds no file the roles wrote (their Podman config went with them).
        assert (
            ssh(STACK, node.name, as_service("ls -A ~/.config/containers 2>/dev/null || true"))
            == ""
        ), node.name


def changed_lines(was: str, now: str) -> list[str]:
    """The lines a diff shows: '-' as built, '+' now."""
    return [
        line
        for line in difflib.unified_diff(was.splitlines(), now.splitlines(), lineterm="", n=0)
        if line[:1] in "+-" and line[:3] not in ("+++", "---")
    ]


# --- 6: an interrupted up -------------------------------------------------------------------


def interrupt_halfway(project: PulumiProject, log: Path, created: int) -> int:
    """Start `pulumi up`, send it SIGINT once `created` resources are made; its exit status."""
    with log.open("w") as out:
        engine = project.start("up", "--stack", STACK, "--yes", stdout=out)
        try:
            deadline = time.monotonic() + 240
            while log.read_text().count(" created (") < created:
                assert engine.poll() is None, f"up ended before the interrupt:\n{log.read_text()}"
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(0.2)
            engine.send_signal(signal.SIGINT)
            return engine.wait(timeout=300)
        finally:
            if engine.poll() is None:
                engine.kill()


def node_resources(project: PulumiProject) -> tuple[int, int]:
    """(resources on the nodes, pending operations) as the stack's state has them."""
    deployment = json.loads(project.run("stack", "export", "--stack", STACK).stdout)["deployment"]
    made = [r for r in deployment["resources"] if r["type"].startswith("pulumi-python:dynamic")]
    return len(made), len(deployment.get("pending_operations") or [])


def test_an_interrupted_up_then_run_again_converges(
    sim: SimTopology, deploy: PulumiProject, tmp_path: Path
) -> None:
    log = tmp_path / "up.log"
    assert interrupt_halfway(deploy, log, created=12) != 0, log.read_text()
    halfway, pending = node_resources(deploy)
    print(f"interrupted up: {halfway} node resources in state, {pending} pending operations")
    # A first SIGINT lets in-flight operations finish, so nothing should be pending; a second
    # one (or a kill) can leave creates pending. The way out is the same and is harmless when
    # there are none: refresh, dropping pending creates (their resources are made again by up,
    # which is idempotent on the node).
    deploy.run("refresh", "--stack", STACK, "--yes", "--clear-pending-creates")
    deploy.run("up", "--stack", STACK, "--yes")
    converged, pending = node_resources(deploy)
    assert 0 < halfway < converged and pending == 0, (halfway, converged, pending)
    for node in sim.nodes:
        assert_converged(node.name)
        assert ssh(STACK, node.name, TEMP_FILES) == "", node.name
    deploy.run("preview", "--stack", STACK, "--refresh", "--expect-no-changes")


# --- 7: a stopped node ----------------------------------------------------------------------


def stop_node(node: str) -> None:
    container = nodes.container_name(STACK, node)
    nodes.stop_container(container, what=f"stack {STACK}: stop {container}")


def test_a_stopped_node_is_named_and_the_other_converges(
    sim: SimTopology, deploy: PulumiProject
) -> None:
    """Under the project's `refresh: always`, so the refresh that cannot reach the node is part
    of the run: it marks that node's resources instead of failing the whole refresh. With
    `--continue-on-error`, as otherwise the engine starts nothing after the first failure.

    Stopping a simulated node removes its veths, so spark-1's fabric ports go with it (a real
    port would stay, without carrier): the other node's repair is read on its own resources."""
    manifest = yaml.safe_load((deploy.root / "Pulumi.yaml").read_text())
    assert manifest["options"]["refresh"] == "always"
    ssh(STACK, "spark-1", "sudo systemctl stop sparkrack-irq-affinity")
    ssh(STACK, "spark-1", as_service("echo '# edited' >> ~/.config/containers/storage.conf"))
    stop_node("spark-2")
    try:
        failed = deploy.run("up", "--stack", STACK, "--yes", "--continue-on-error", check=False)
        assert failed.returncode != 0, failed.stdout
        assert f"node spark-2 ({PREFIX}.12): unreachable" in failed.stdout, failed.stdout
        assert ssh(STACK, "spark-1", "systemctl is-active sparkrack-irq-affinity") == "active"
        storage = as_service("cat ~/.config/containers/storage.conf")
        assert "# edited" not in ssh(STACK, "spark-1", storage)
    finally:
        assert cluster.up(sim, print).healthy
    # The node is back, its links reset: the next up makes the rack whole again.
    deploy.run("up", "--stack", STACK, "--yes")
    for node in sim.nodes:
        assert_converged(node.name)
    deploy.run("preview", "--stack", STACK, "--expect-no-changes")


# --- 8: a node whose host key changed ------------------------------------------------------------

ROLES = "base,fabric,cpu_pinning,podman"


def replace_host_key(node: str, aside: Path) -> None:
    """The node's sshd given a new host key (its keys are mounted from the simulator's cache);
    the old pair is kept in `aside`."""
    keys = node_ssh_dir(STACK, node)
    for name in ("ssh_host_ed25519_key", "ssh_host_ed25519_key.pub"):
        (keys / name).rename(aside / name)
    key = str(keys / "ssh_host_ed25519_key")
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", key], check=True)
    restart_sshd(node)


def restore_host_key(node: str, aside: Path) -> None:
    keys = node_ssh_dir(STACK, node)
    for name in ("ssh_host_ed25519_key", "ssh_host_ed25519_key.pub"):
        (aside / name).replace(keys / name)
    restart_sshd(node)


def restart_sshd(node: str) -> None:
    container = nodes.container_name(STACK, node)
    restart = ["podman", "exec", container, "systemctl", "restart", "ssh"]
    subprocess.run(restart, check=True, capture_output=True)


def mismatch_lines(text: str) -> set[str]:
    """Each distinct message about the key (Pulumi shows a diagnostic inline and in its summary,
    and a preview and an update each run the program)."""
    return {
        line[line.index("node spark-2") :] for line in text.splitlines() if "key mismatch" in line
    }


def test_a_changed_host_key_is_one_line_and_the_other_node_converges(
    sim: SimTopology, deploy: PulumiProject, tmp_path: Path
) -> None:
    ssh(STACK, "spark-1", "sudo systemctl stop sparkrack-irq-affinity")
    replace_host_key("spark-2", tmp_path)
    try:
        preview = deploy.run("preview", "--stack", STACK, check=False)
        up = deploy.run("up", "--stack", STACK, "--yes", check=False)
        verify = sparkrack_verify(deploy.env, STACK, deploy.root / "stacks", "--roles", ROLES)
        for command, done in (("preview", preview), ("up", up), ("verify", verify)):
            text = done.stdout + done.stderr
            assert "Traceback" not in text, f"{command}:\n{text}"
            lines = mismatch_lines(text)
            assert len(lines) == 1, f"{command}: {lines}\n{text}"
            assert next(iter(lines)).startswith(
                f"node spark-2 ({PREFIX}.12): host key mismatch: it offers ssh-ed25519 SHA256:"
            ), lines
        assert up.returncode != 0 and verify.returncode == 1
        assert "1 node(s) left as they were: spark-2" in up.stdout + up.stderr
        assert ssh(STACK, "spark-1", "systemctl is-active sparkrack-irq-affinity") == "active"
    finally:
        restore_host_key("spark-2", tmp_path)
    deploy.run("up", "--stack", STACK, "--yes")
    deploy.run("preview", "--stack", STACK, "--expect-no-changes")

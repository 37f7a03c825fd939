"""sparkrack's node resources through the real engine on a two-node sim (issue 5, first half).

Module order matters: up, idempotence, drift and repair, a stopped node, destroy. The sim runs on
its own stack and /24 so no other test run or a developer's sim is touched.
"""

from __future__ import annotations

import base64
import json
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparkrack.sim import cluster, nodes
from sparkrack.sim.keys import known_hosts_path, login_key
from sparkrack.sim.topology import SimTopology, two_node_topology
from sparkrack.text.commands import as_user
from sparkrack.transport.ssh import TRACE_ENV

from .conftest import PulumiProject
from .programs import RESOURCES_FENCE_PORT as FENCE_PORT
from .programs import RESOURCES_SERVICE_USER as SERVICE
from .programs import program_project, resources_config
from .sim_fixtures import fresh, ssh
from .sim_fixtures import planned_changes as changes_in

pytestmark = pytest.mark.e2e

STACK = "e2e-res"
PREFIX = "198.18.7"
CONF = "/etc/sparkrack-e2e/app.conf"
UNIT = "sparkrack-e2e.service"
PORT = "enp1s0f0np0"
SECRET, SECRET_VALUE = "sparkrack-e2e-secret", "not-a-real-password-spark-2"
RUNTIME = f"/run/user/$(id -u {SERVICE})"  # the service user's runtime directory, a tmpfs
SHAPE = (
    f"{PORT} mtu 9000 up; {{address}}; {UNIT} active; linger yes; somaxconn 8192; "
    "fence accept / reset"
)


@pytest.fixture(scope="module")
def sim() -> Iterator[SimTopology]:
    yield from fresh(two_node_topology(stack=STACK, mgmt_prefix=PREFIX))


@pytest.fixture(scope="module")
def project(sim: SimTopology, tmp_path_factory: pytest.TempPathFactory) -> PulumiProject:
    nodes = [(node.name, node.mgmt_address) for node in sim.nodes]
    config = resources_config(nodes, str(login_key(STACK)), str(known_hosts_path(STACK)))
    root = tmp_path_factory.mktemp("resources") / "project"
    return program_project(root, "resources", STACK, config)


def planned_changes(project: PulumiProject, *args: str) -> dict[str, tuple[str, list[str]]]:
    """resource name -> (operation, changed properties) for every step that is not a no-op."""
    streaming = {"PULUMI_ENABLE_STREAMING_JSON_PREVIEW": "true"}
    done = project.run("preview", "--stack", STACK, "--json", *args, extra_env=streaming)
    return changes_in(done.stdout)


def last_update_changes(project: PulumiProject) -> dict[str, int]:
    history = json.loads(project.run("stack", "history", "--stack", STACK, "--json").stdout)
    return dict(history[0]["resourceChanges"])


def fence_shape(node: str) -> str:
    """The fence's two rules for FENCE_PORT, as nft lists them (full2 knocks on Ray's ports)."""
    listed = ssh(STACK, node, "sudo nft list table inet sparkrack_ray_fence || true")
    rules = [line.strip() for line in listed.splitlines() if f"dport {FENCE_PORT}" in line]
    return f"fence {' / '.join(rule.split()[-1] for rule in rules) or 'none'}"


def node_shape(node: str, index: int) -> str:
    """The managed state of a node in one line: what the program declares, read by hand."""
    address = f"198.19.{70 + index}.{index + 1}/24"
    link = json.loads(ssh(STACK, node, f"ip -j addr show dev {PORT}"))[0]
    addresses = [
        f"{a['local']}/{a['prefixlen']}" for a in link["addr_info"] if a["scope"] == "global"
    ]
    up = "up" if "UP" in link["flags"] else "down"
    unit = ssh(STACK, node, f"systemctl is-active {UNIT}", check=False)
    linger = ssh(STACK, node, f"loginctl show-user -p Linger --value {SERVICE}", check=False)
    somaxconn = ssh(STACK, node, "cat /proc/sys/net/core/somaxconn")
    found = (
        f"{PORT} mtu {link['mtu']} {up}; {','.join(addresses) or 'no address'}; "
        f"{UNIT} {unit}; linger {linger}; somaxconn {somaxconn}; "
        f"{fence_shape(node)}"
    )
    return found if found != SHAPE.format(address=address) else "converged"


def test_up_converges_from_fresh_nodes(sim: SimTopology, project: PulumiProject) -> None:
    project.run("up", "--stack", STACK, "--yes")
    for index, node in enumerate(sim.nodes):
        assert node_shape(node.name, index) == "converged", node.name
        assert ssh(STACK, node.name, f"sudo stat -c '%a %U %G' {CONF}") == f"640 root {SERVICE}"
        assert ssh(STACK, node.name, f"sudo cat {CONF}") == f"node={node.name}"


def test_secret_content_is_never_plain_in_state(project: PulumiProject) -> None:
    exported = project.run("stack", "export", "--stack", STACK).stdout
    assert "not-a-real-token" not in exported
    assert '"content"' in exported  # it is there, encrypted


def secret_shown() -> str:
    """The secret's value as Podman hands it to a container on spark-2 ('' without it)."""
    show = f"podman secret inspect --showsecret --format '{{{{.SecretData}}}}' {SECRET} || true"
    return ssh(STACK, "spark-2", as_user(SERVICE, show))


def on_disk(node: str) -> str:
    """Every file on the node's disk holding the secret's value, plain or base64."""
    encoded = base64.b64encode(SECRET_VALUE.encode()).decode()
    values = f"-e {shlex.quote(SECRET_VALUE)} -e {shlex.quote(encoded)}"
    places = "/etc /home /root /tmp /var /opt /srv /usr/local"
    return ssh(STACK, node, f"sudo grep -rlsF {values} {places} || true")


def test_a_podman_secret_is_kept_in_memory_only() -> None:
    """In the service user's runtime directory (a tmpfs): nowhere on disk, plain or base64."""
    assert secret_shown() == SECRET_VALUE
    assert ssh(STACK, "spark-2", f"stat -f -c %T {RUNTIME}") == "tmpfs"
    stored = ssh(STACK, "spark-2", f"sudo cat {RUNTIME}/sparkrack-secrets/secretsdata.json")
    assert base64.b64encode(SECRET_VALUE.encode()).decode() in stored
    assert on_disk("spark-2") == ""


def test_second_up_changes_nothing(project: PulumiProject) -> None:
    project.run("up", "--stack", STACK, "--yes")
    changes = last_update_changes(project)
    assert set(changes) == {"same"}, changes


def test_an_up_reads_the_nodes_in_its_preview_only(project: PulumiProject, tmp_path: Path) -> None:
    """`up --refresh` (as `refresh: always` runs it) previews, then updates, and each refreshes;
    the update trusts what its own preview read (asking.read_once), so only one process asks
    the nodes anything."""
    trace = tmp_path / "commands.jsonl"
    project.run("up", "--stack", STACK, "--refresh", "--yes", extra_env={TRACE_ENV: str(trace)})
    asked = [json.loads(line) for line in trace.read_text().splitlines()]
    assert {row["node"] for row in asked} == {"spark-1", "spark-2"}
    assert len({row["pid"] for row in asked}) == 1, "the update read the nodes again"


def test_preview_refresh_expects_no_changes(project: PulumiProject) -> None:
    project.run("preview", "--stack", STACK, "--refresh", "--expect-no-changes")


HAND_MADE_DRIFT = {
    "spark-2": [
        f"sudo ip link set dev {PORT} mtu 1500",
        f"echo edited | sudo tee -a {CONF}",
        f"sudo rm {RUNTIME}/sparkrack-secrets/secretsdata.json",  # as a reboot clears it
    ],
    "spark-1": [
        f"sudo ip addr del 198.19.70.1/24 dev {PORT}",
        f"sudo systemctl stop {UNIT}",
        f"sudo loginctl disable-linger {SERVICE}",
        "sudo sysctl -w net.core.somaxconn=4096",
        "sudo nft flush table inet sparkrack_ray_fence",
    ],
}


def test_hand_made_drift_shows_as_exactly_that_property(project: PulumiProject) -> None:
    for node, commands in HAND_MADE_DRIFT.items():
        ssh(STACK, node, " && ".join(commands))
    assert planned_changes(project, "--refresh") == {
        "spark-2-port0": ("update", ["mtu"]),
        "spark-2-conf": ("update", ["sha256"]),
        # changed_at: an output the update sets, shown beside (it keeps its value: same value)
        "spark-2-secret": ("update", ["changed_at", "in_memory"]),
        "spark-1-port0": ("update", ["addresses", "routes"]),
        "spark-1-unit": ("update", ["active"]),
        "spark-1-user": ("update", ["linger"]),
        "spark-1-somaxconn": ("update", ["value"]),
        "spark-1-fence": ("update", ["rules"]),
    }


def test_up_repairs_the_drift(sim: SimTopology, project: PulumiProject) -> None:
    project.run("up", "--stack", STACK, "--refresh", "--yes")
    for index, node in enumerate(sim.nodes):
        assert node_shape(node.name, index) == "converged", node.name
    assert ssh(STACK, "spark-2", f"sudo cat {CONF}") == "node=spark-2"
    assert secret_shown() == SECRET_VALUE
    project.run("preview", "--stack", STACK, "--refresh", "--expect-no-changes")


def test_a_changed_input_replaces_or_updates_as_declared(project: PulumiProject) -> None:
    project.run("config", "set", "--stack", STACK, "e2e:generation", "2")
    changes = planned_changes(project)
    project.run("config", "rm", "--stack", STACK, "e2e:generation")
    assert changes == {
        "spark-1-conf": ("update", ["content", "sha256"]),
        "spark-2-conf": ("update", ["content", "sha256"]),
    }


def test_no_temporary_file_is_left_on_a_node(sim: SimTopology) -> None:
    for node in sim.nodes:
        left = ssh(STACK, node.name, "sudo find /etc -name '*.sparkrack-tmp.*'")
        assert left == "", node.name


def test_a_stopped_node_fails_only_its_own_resources(
    sim: SimTopology, project: PulumiProject
) -> None:
    container = nodes.container_name(STACK, "spark-2")
    nodes.stop_container(container, what=f"stack {STACK}: stop {container}")
    try:
        project.run("config", "set", "--stack", STACK, "e2e:generation", "3")
        failed = project.run("up", "--stack", STACK, "--yes", check=False)
        assert failed.returncode != 0
        assert f"node spark-2 ({PREFIX}.12): unreachable" in failed.stdout
        assert "node spark-1" not in failed.stdout
        assert ssh(STACK, "spark-1", f"sudo cat {CONF}") == "node=spark-1 generation=3"
    finally:
        project.run("config", "rm", "--stack", STACK, "e2e:generation")
        assert cluster.up(sim, print).healthy
    # The node came back fresh (its runtime directory too, the secret's value with it): a
    # refreshing up brings it back to the declared state.
    project.run("up", "--stack", STACK, "--refresh", "--yes")
    assert secret_shown() == SECRET_VALUE
    project.run("preview", "--stack", STACK, "--refresh", "--expect-no-changes")


HOME = f"/home/{SERVICE}"
MODEL_FILE = f"{HOME}/.cache/huggingface/model-00001-of-00001.safetensors"


def test_destroy_removes_what_was_made(sim: SimTopology, project: PulumiProject) -> None:
    """Everything the program made goes, except the service user `up` created and its home:
    they hold the weights, the staged shards and the images (issue 31), and are said kept."""
    for node in sim.nodes:
        place = f"sudo -u {SERVICE} sh -c 'mkdir -p {MODEL_FILE.rsplit('/', 1)[0]}"
        ssh(STACK, node.name, f"{place} && echo weights > {MODEL_FILE}'")
    done = project.run("destroy", "--stack", STACK, "--yes")
    for node in sim.nodes:
        kept = f"node {node.name} ({node.mgmt_address}): kept user {SERVICE} and {HOME}"
        assert kept in done.stdout + done.stderr, done.stdout
        assert ssh(STACK, node.name, f"sudo cat {MODEL_FILE}") == "weights", node.name
    for node in sim.nodes:
        left = ssh(
            STACK,
            node.name,
            f"sudo ls -d /etc/sparkrack-e2e/* /etc/systemd/system/{UNIT} "
            "/etc/sysctl.d/90-sparkrack-net.core.somaxconn.conf /etc/sparkrack/nftables/* "
            "/etc/systemd/system/sparkrack-nft-* "
            f"/etc/systemd/system/user@$(id -u {SERVICE}).service.d/50-sparkrack-memlock.conf "
            "2>/dev/null || true",
        )
        assert left == "", f"{node.name}: {left}"
        link = json.loads(ssh(STACK, node.name, f"ip -j addr show dev {PORT}"))[0]
        assert (link["mtu"], "UP" in link["flags"]) == (1500, False), node.name
        assert [a for a in link["addr_info"] if a["scope"] == "global"] == [], node.name
        assert ssh(STACK, node.name, f"loginctl show-user -p Linger --value {SERVICE}") == "no"
        assert ssh(STACK, node.name, "cat /proc/sys/net/core/somaxconn") == "4096"
        assert ssh(STACK, node.name, "sudo nft list tables") == "", node.name
    assert secret_shown() == ""

"""Node container arguments, SSH settings and the status table, computed without a host."""

from __future__ import annotations

import dataclasses
import subprocess
from pathlib import Path

import pytest

from sparkrack.cli.sim import status_table
from sparkrack.sim import nodes
from sparkrack.sim.cluster import ClusterStatus, NodeStatus
from sparkrack.sim.keys import ssh_config_entry
from sparkrack.sim.shell import SimError
from sparkrack.sim.topology import SimNode

pytestmark = pytest.mark.unit

NODE = SimNode("spark-1", "198.18.0.11")


@pytest.fixture(autouse=True)
def cache_in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    return tmp_path


def option_values(args: list[str], option: str) -> list[str]:
    return [args[i + 1] for i, arg in enumerate(args) if arg == option]


def test_node_runs_privileged_systemd_on_runc_with_the_given_limits() -> None:
    args = nodes.run_args("sim-2", NODE, "localhost/sparkrack/node:abc", (4096, 2048))
    assert args[:2] == ["podman", "run"]
    assert "--privileged" in args
    assert option_values(args, "--runtime") == ["runc"]
    assert option_values(args, "--systemd") == ["always"]
    assert option_values(args, "--cgroupns") == ["private"]
    assert option_values(args, "--ulimit") == ["nofile=4096:4096", "nproc=2048:2048"]
    assert option_values(args, "--name") == ["sparkrack-sim-2-spark-1"]
    assert option_values(args, "--network") == [
        "sparkrack-sim-2-mgmt:ip=198.18.0.11,interface_name=enP7s7"
    ]
    assert "sparkrack.sim.stack=sim-2" in option_values(args, "--label")
    assert args[args.index("localhost/sparkrack/node:abc") + 1] == "/sbin/init"


def test_mounts_carry_the_cluster_keys_and_rdma_tree(cache_in_tmp: Path) -> None:
    mounts = option_values(nodes.run_args("sim-2", NODE, "img", (1, 1)), "-v")
    node_dir = cache_in_tmp / "sparkrack" / "sim" / "sim-2" / "nodes" / "spark-1"
    assert f"{node_dir / 'ssh'}:/etc/ssh/sparkrack-sim:ro" in mounts
    assert f"{node_dir / 'infiniband'}:/opt/sparkrack-sim/infiniband:ro" in mounts
    assert "sparkrack-sim-2-spark-1-home:/home" in mounts
    assert f"{node_dir / 'machine-id'}:/etc/machine-id:ro" in mounts


def test_each_node_has_its_own_machine_id() -> None:
    """udev derives the NICs' MACs from it: one shared id put two nodes on one MAC."""
    ids = {nodes.machine_id(stack, node) for stack in ("sim-2", "e2e-2") for node in ("a", "b")}
    assert len(ids) == 4
    assert all(len(found) == 32 and int(found, 16) >= 0 for found in ids)


def test_ulimits_stay_within_the_hard_limits() -> None:
    import resource

    nofile, nproc = nodes.ulimits()
    hard_nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    assert nofile <= hard_nofile or hard_nofile == resource.RLIM_INFINITY
    assert nproc <= int(Path("/proc/sys/kernel/pid_max").read_text())


def test_legacy_cgroup_force_only_on_a_v1_host(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nodes, "host_has_cgroup_v1", lambda: True)
    assert "SYSTEMD_CGROUP_ENABLE_LEGACY_FORCE=1" in nodes.node_init_command()
    monkeypatch.setattr(nodes, "host_has_cgroup_v1", lambda: False)
    assert nodes.node_init_command() == ["/sbin/init"]


def test_ssh_config_pins_host_keys(cache_in_tmp: Path) -> None:
    entry = ssh_config_entry("sim-2", NODE)
    stack_dir = cache_in_tmp / "sparkrack" / "sim" / "sim-2"
    assert entry.startswith("Host spark-1 198.18.0.11\n  HostName 198.18.0.11\n")
    assert "  User ubuntu\n" in entry  # the owner's login: `up` makes the service user
    assert f"  IdentityFile {stack_dir / 'id_ed25519'}\n" in entry
    assert f"  UserKnownHostsFile {stack_dir / 'known_hosts'}\n" in entry
    assert "  StrictHostKeyChecking yes\n" in entry


def test_status_table_reads_per_node_and_says_what_is_wrong() -> None:
    status = ClusterStatus(
        stack="sim-2",
        nodes=(
            NodeStatus("spark-1", "198.18.0.11", "running", "running", ssh=True),
            NodeStatus("spark-2", "198.18.0.12", "exited", "-", ssh=False),
        ),
        missing_links=("spark-1:enp1s0f0np0 <-> spark-2:enp1s0f1np1",),
        counter_updater_pid=None,
        dhcp_server="none",
    )
    assert not status.healthy
    assert status_table(status).splitlines() == [
        "stack sim-2: NOT healthy",
        "NODE     ADDRESS      CONTAINER  SYSTEMD  SSH",
        "spark-1  198.18.0.11  running    running  yes",
        "spark-2  198.18.0.12  exited     -        no",
        "fabric: 1 missing or mis-wired: spark-1:enp1s0f0np0 <-> spark-2:enp1s0f1np1",
        "RDMA counter updater: not running",
    ]


def test_status_of_a_cluster_that_is_not_up_says_so() -> None:
    status = ClusterStatus(
        stack="sim-16",
        nodes=tuple(NodeStatus(f"n{i}", "x", "missing", "-", ssh=False) for i in range(3)),
        missing_links=tuple(f"link {i}" for i in range(6)),
        counter_updater_pid=None,
        dhcp_server="not running",
    )
    lines = status_table(status).splitlines()
    assert lines[0] == "stack sim-16: not up (sparkrack sim up sim-16)"
    assert lines[-3:] == [
        "fabric: 6 missing or mis-wired: link 0; link 1; link 2; link 3; and 2 more",
        "RDMA counter updater: not running",
        "DHCP server on the switch: not running",
    ]


def test_a_dhcp_fabric_is_not_healthy_without_its_server() -> None:
    nodes = (NodeStatus("spark-1", "198.18.0.11", "running", "running", ssh=True),)
    up = ClusterStatus("sim-16", nodes, (), counter_updater_pid=7, dhcp_server="pid 9")
    assert up.healthy
    assert not dataclasses.replace(up, dhcp_server="not running").healthy
    assert dataclasses.replace(up, dhcp_server="none").healthy


def fake_proc(root: Path, inotify_fds: dict[int, int]) -> Path:
    """A /proc with `count` inotify descriptors (and one pipe) per PID."""
    for pid, count in inotify_fds.items():
        fds = root / str(pid) / "fd"
        fds.mkdir(parents=True)
        for fd in range(count):
            (fds / str(fd + 3)).symlink_to("anon_inode:inotify")
        (fds / "99").symlink_to("pipe:[4242]")
    return root


def test_inotify_instances_are_counted_across_processes(tmp_path: Path) -> None:
    proc = fake_proc(tmp_path, {1: 3, 250: 2, 4000: 0})
    assert nodes.inotify_instances_in_use(proc) == 5


def test_a_rack_that_would_exhaust_inotify_is_refused_with_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    limit = tmp_path / "max_user_instances"
    limit.write_text("128\n")
    monkeypatch.setattr(nodes, "INOTIFY_LIMIT", limit)
    monkeypatch.setattr(nodes, "inotify_instances_in_use", lambda: 100)
    assert nodes.inotify_shortfall(2) is None
    message = nodes.inotify_shortfall(16)
    assert message is not None
    assert "28 of fs.inotify.max_user_instances=128 are free" in message
    assert "sysctl -w fs.inotify.max_user_instances=1024" in message


def test_a_running_record_without_its_process_is_made_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A machine restored from a snapshot keeps Podman's 'running' record, not the process: CI
    then waited on nodes nothing could exec in. The stale container is removed and recreated."""
    image = "localhost/sparkrack/node:abc"
    name = nodes.container_name("sim-2", NODE.name)
    stale = nodes.ContainerState(name, "running", 2**22 + 1, image)  # above any pid_max
    monkeypatch.setattr(nodes, "inspect_container", lambda name: stale)
    monkeypatch.setattr(nodes, "ensure_volumes", lambda stack, node: None)
    calls: list[list[str]] = []

    def run(args: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        calls.append(list(args))
        return subprocess.CompletedProcess(args, 0, "", "")

    monkeypatch.setattr(nodes, "run", run)
    assert nodes.ensure_node("sim-2", NODE, image) == "created"
    assert calls[0] == ["podman", "rm", "--force", "--time", "0", name]
    assert calls[-1][:2] == ["podman", "run"]


DYING = "Error: given PIDs did not die within timeout"


class Podman:
    """Answers a stop or removal with the given (exit status, stderr) in turn; counts the asks
    and the seconds slept between them on a clock that only sleeping moves."""

    def __init__(self, answers: list[tuple[int, str]]) -> None:
        self.answers = answers
        self.asked = 0
        self.now = 0.0

    def run(self, args: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        code, stderr = self.answers[min(self.asked, len(self.answers) - 1)]
        self.asked += 1
        return subprocess.CompletedProcess(args, code, "", stderr)

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def until_dead(podman: Podman, patience_s: float = 120.0) -> None:
    nodes.until_dead(
        ["podman", "stop", "--time", "0", "n"],
        what="stack sim-2: stop n",
        patience_s=patience_s,
        sleep=podman.sleep,
        clock=lambda: podman.now,
    )


def test_a_node_still_dying_is_asked_again_until_it_is_gone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Podman gives up 5 s after its SIGKILL and leaves the container stopping; under CI's load a
    node's processes took longer, the stop failed and so did the rack's removal after it."""
    podman = Podman([(125, DYING), (125, DYING), (0, "")])
    monkeypatch.setattr(nodes, "run", podman.run)
    until_dead(podman)
    assert podman.asked == 3


def test_another_podman_failure_is_not_asked_again(monkeypatch: pytest.MonkeyPatch) -> None:
    podman = Podman([(125, "Error: no container with name or ID n found")])
    monkeypatch.setattr(nodes, "run", podman.run)
    with pytest.raises(SimError, match=r"stop n: .* exited 125: Error: no container"):
        until_dead(podman)
    assert podman.asked == 1


def test_a_node_that_never_dies_fails_after_the_patience(monkeypatch: pytest.MonkeyPatch) -> None:
    podman = Podman([(125, DYING)])
    monkeypatch.setattr(nodes, "run", podman.run)
    with pytest.raises(SimError, match="did not die within timeout"):
        until_dead(podman, patience_s=10.0)
    assert podman.asked == 11 and podman.now == 10.0

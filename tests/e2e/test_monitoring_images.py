"""The monitoring images, run by hand inside a simulated node as the rootless service user.

The images are built (or found) here, loaded into the service user's Podman on spark-1 the way
the roles ship images (`podman save | ssh node podman load`), and each exporter is started with
the command line and options the monitoring role uses (CONTAINERS below: the reference for the
role). Then each is scraped from inside the node. No `pulumi up`: this proves the images, the
role's wiring is tested in test_monitoring_sim.py.

The node is a systemd container on a cgroup v1 (hybrid) host, with a private cgroup namespace;
what each exporter needs there is said beside its options.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import time
from collections.abc import Iterator

import pytest

from sparkrack.sim import cluster
from sparkrack.sim.keys import ssh_command
from sparkrack.sim.monitoring_images import (
    EXPORTERS_LATEST,
    PROMETHEUS_LATEST,
    ensure_monitoring_images,
)
from sparkrack.sim.topology import SimTopology, rdma_device_for

from .sim_fixtures import poll, require_host_tools, shipped_rack

pytestmark = pytest.mark.e2e

STACK = "e2e-monimg"
MGMT_PREFIX = "198.18.21"
NODE = "spark-1"
TEXTFILE_DIR = "$HOME/monitoring/textfile"
# Every run needs the user's runtime dir (rootless Podman's state, the Podman socket).
USER_ENV = "export XDG_RUNTIME_DIR=/run/user/$(id -u); "
NODE_EXPORTER_COLLECTORS = (
    "cpu", "meminfo", "loadavg", "filesystem", "netdev", "diskstats", "hwmon", "textfile",
    "pressure",
)  # fmt: skip
# node-exporter's default fs-types-exclude less `overlay`: a simulated node's / is the overlay
# of its container, and without this it has no mountpoint="/" (a real GB10's / is ext4).
FS_TYPES_EXCLUDE = (
    "^(autofs|binfmt_misc|bpf|cgroup2?|configfs|debugfs|devpts|devtmpfs|fusectl|hugetlbfs|"
    "iso9660|mqueue|nsfs|proc|procfs|pstore|rpc_pipefs|securityfs|selinuxfs|squashfs|erofs|"
    "sysfs|tracefs)$"
)

CDI_GPU = "nvidia.com/gpu=all"
CDI_SPEC = "/etc/cdi/nvidia.yaml"

# name -> (podman run options, command). All host network: a rootless container with its own
# network namespace cannot mount a fresh sysfs inside this node ("mount sysfs:/sys ...
# operation not permitted"), and the exporters must be reachable on the node's address anyway.
CONTAINERS: dict[str, tuple[str, str]] = {
    "node-exporter": (
        # The node's / at /host (read-only, mounts below it followed), and the textfile dir.
        f"--network host --pid host -v /:/host:ro,rslave -v {TEXTFILE_DIR}:/textfile:ro",
        "prometheus-node-exporter --path.rootfs=/host --web.listen-address=:9100 "
        "--collector.textfile.directory=/textfile --collector.disable-defaults "
        + " ".join(f"--collector.{name}" for name in NODE_EXPORTER_COLLECTORS)
        + f" --collector.filesystem.fs-types-exclude={shlex.quote(FS_TYPES_EXCLUDE)}",
    ),
    "gpu-exporter": (
        # The GPU by CDI name, as the monitoring role gives it: the spec (generated below by the
        # node's nvidia-ctk) brings the device nodes and nvidia-smi (a python3 script in the sim:
        # the image's python3 runs it).
        f"--network host --device {CDI_GPU} -v /proc/meminfo:/host/proc/meminfo:ro",
        "python3 /opt/sparkrack/gpu_exporter.py --listen-address :9835 "
        "--nvidia-smi /usr/bin/nvidia-smi --meminfo /host/proc/meminfo",
    ),
    "rdma-textfile": (
        # The container's own /sys lacks the node's /sys/class/infiniband (a mount of its own).
        f"--network host -v /sys/class/infiniband:/sys/class/infiniband:ro "
        f"-v {TEXTFILE_DIR}:/textfile",
        "python3 /opt/sparkrack/rdma_textfile.py --sysfs /sys/class/infiniband "
        "--output /textfile/rdma.prom --interval 5",
    ),
    "cadvisor": (
        # The node's cgroup tree: the container's own cgroup mount is rooted at its own cgroup
        # (empty); the service user's Podman socket (systemctl --user enable --now
        # podman.socket); the machine id for machine_* labels.
        "--network host -v /sys/fs/cgroup:/sys/fs/cgroup:ro,rslave "
        "-v /etc/machine-id:/etc/machine-id:ro "
        "-v $XDG_RUNTIME_DIR/podman/podman.sock:/run/podman/podman.sock",
        "/usr/local/bin/cadvisor --port=8080 --podman=unix:///run/podman/podman.sock "
        "--housekeeping_interval=10s",
    ),
}
PORTS = {"node-exporter": 9100, "gpu-exporter": 9835, "cadvisor": 8080}
SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)")

TIMINGS: dict[str, float] = {}


def node_ssh(command: str, node: str = NODE) -> list[str]:
    """ssh to the node with the cluster's settings, waiting longer than its 5 s to connect:
    this machine is shared, and under load sshd in a node can take that long to answer."""
    argv = ssh_command(STACK, node, USER_ENV + command)
    return [argv[0], "-o", "ConnectTimeout=60", *argv[1:]]


def on_node(command: str, check: bool = True, node: str = NODE) -> str:
    """stdout of `command` run by the service user on the node (spark-1 unless told)."""
    done = subprocess.run(node_ssh(command, node), capture_output=True, text=True, timeout=300)
    if check and done.returncode != 0:
        pytest.fail(
            f"stack {STACK}, node {node}: `{command}` exited {done.returncode}:\n"
            f"{done.stdout}\n{done.stderr}"
        )
    return done.stdout.strip()


def load_image(reference: str, attempts: int = 3) -> None:
    """`podman save` here into the service user's `podman load` on the node. A connection that
    SSH could not open (exit 255: this machine is shared and sometimes loaded) is tried again."""
    for attempt in range(1, attempts + 1):
        save = subprocess.Popen(["podman", "save", reference], stdout=subprocess.PIPE)
        load = subprocess.run(
            node_ssh("podman load -q"),
            stdin=save.stdout,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        assert save.stdout is not None
        save.stdout.close()
        saved = save.wait()
        if load.returncode != 255 or attempt == attempts:
            break
        print(f"stack {STACK}, node {NODE}: ssh failed ({load.stderr.strip()}), again", flush=True)
    assert load.returncode == 0 and saved == 0, (
        f"stack {STACK}, node {NODE}: loading {reference}: ssh exited {load.returncode}, "
        f"podman save {saved}: {load.stderr[-500:]}"
    )


def timed(name: str, started: float) -> None:
    TIMINGS[name] = round(time.monotonic() - started, 1)
    print(f"timing {name}: {TIMINGS[name]}s", flush=True)


@pytest.fixture(scope="module")
def rack() -> Iterator[SimTopology]:
    """sim-2 copied to its own stack, both images loaded on spark-1, every exporter started."""
    require_host_tools()
    started = time.monotonic()
    ensure_monitoring_images(print)
    timed("ensure_monitoring_images (first call)", started)
    started = time.monotonic()
    ensure_monitoring_images(lambda line: None)
    timed("ensure_monitoring_images (cached)", started)
    topology = shipped_rack("sim-2", STACK, MGMT_PREFIX)
    assert cluster.up(topology, print).healthy
    try:
        for reference in (EXPORTERS_LATEST, PROMETHEUS_LATEST):
            started = time.monotonic()
            load_image(reference)
            timed(f"podman save | ssh podman load {reference}", started)
        on_node("sudo loginctl enable-linger $(id -un)")
        on_node("systemctl --user enable --now podman.socket")
        on_node(f"mkdir -p {TEXTFILE_DIR}")
        on_node(f"sudo nvidia-ctk cdi generate --output={CDI_SPEC}")
        for name, (options, command) in CONTAINERS.items():
            on_node(f"podman run -d --name {name} {options} {EXPORTERS_LATEST} {command}")
        yield topology
    finally:
        cluster.down(topology, print)


def scrape(port: int) -> str:
    """The exporter's /metrics from inside the node, once it answers."""
    url = f"http://127.0.0.1:{port}/metrics"
    return poll(
        lambda: on_node(f"curl -sf --max-time 30 {url}", check=False),
        lambda text: bool(text),
        timeout=120,
    )


def samples(text: str, metric: str) -> list[tuple[str, float]]:
    """(labels, value) of every sample of `metric`."""
    found = []
    for line in text.splitlines():
        match = SAMPLE.match(line)
        if match and match[1] == metric:
            found.append((match[2] or "", float(match[3])))
    return found


def test_every_exporter_keeps_running(rack: SimTopology) -> None:
    status = on_node("podman ps -a --format '{{.Names}} {{.State}}'")
    states = dict(line.split() for line in status.splitlines())
    assert states == dict.fromkeys(CONTAINERS, "running"), status


def test_node_exporter_root_filesystem_is_slash(rack: SimTopology) -> None:
    text = scrape(PORTS["node-exporter"])
    mountpoints = {labels for labels, _ in samples(text, "node_filesystem_size_bytes")}
    assert any('mountpoint="/"' in labels for labels in mountpoints), mountpoints
    assert not any('mountpoint="/host' in labels for labels in mountpoints)


def test_node_exporter_runs_no_infiniband_or_cpufreq_collector(rack: SimTopology) -> None:
    text = scrape(PORTS["node-exporter"])
    collectors = {
        labels.split('"')[1] for labels, _ in samples(text, "node_scrape_collector_success")
    }
    assert collectors == set(NODE_EXPORTER_COLLECTORS)
    names = {match[1] for match in map(SAMPLE.match, text.splitlines()) if match}
    forbidden = ("node_infiniband_", "node_cpu_frequency_", "node_cpu_scaling_")
    assert not [name for name in names if name.startswith(forbidden)]


def test_textfile_rdma_series_reach_node_exporter(rack: SimTopology) -> None:
    text = poll(
        lambda: scrape(PORTS["node-exporter"]),
        lambda text: "sparkrack_rdma_port_up" in text,
        timeout=60,
    )
    assert samples(text, "node_textfile_scrape_error") == [("", 0.0)]
    up = {labels: value for labels, value in samples(text, "sparkrack_rdma_port_up")}
    # Nobody configured this rack's fabric: every port is down, as an mlx5 port would be.
    assert up['{device="rocep1s0f0",netdev="enp1s0f0np0",port="1"}'] == 0
    assert len(up) == 4 and len(samples(text, "sparkrack_rdma_port_xmit_bytes_total")) == 4


def test_textfile_bytes_are_the_sysfs_words_times_four(rack: SimTopology) -> None:
    counter = "/sys/class/infiniband/rocep1s0f0/ports/1/counters/port_xmit_data"
    before = int(on_node(f"cat {counter}"))
    collect = (
        "python3 /opt/sparkrack/rdma_textfile.py --once --sysfs /sys/class/infiniband "
        "--output /tmp/once.prom && cat /tmp/once.prom"
    )
    once = (
        f"podman run --rm --network host -v /sys/class/infiniband:/sys/class/infiniband:ro "
        f"{EXPORTERS_LATEST} sh -c {shlex.quote(collect)}"
    )
    text = on_node(once)
    after = int(on_node(f"cat {counter}"))
    [value] = [
        value
        for labels, value in samples(text, "sparkrack_rdma_port_xmit_bytes_total")
        if 'device="rocep1s0f0"' in labels
    ]
    assert 4 * before <= value <= 4 * after and value % 4 == 0


def textfile_xmit_bytes(device: str) -> float:
    text = on_node(f"cat {TEXTFILE_DIR}/rdma.prom")
    [value] = [
        value
        for labels, value in samples(text, "sparkrack_rdma_port_xmit_bytes_total")
        if f'device="{device}"' in labels
    ]
    return value


def test_traffic_over_a_cable_moves_the_textfile_counter(rack: SimTopology) -> None:
    """Jumbo pings over spark-1's first cable: its RDMA device's xmit bytes grow by at least
    what was sent (the simulator's counters follow the veth; the collector multiplies by 4)."""
    [cable] = [c for c in rack.cables if c.a_node == NODE][:1]
    ends = ((cable.a_node, cable.a_port_netdev, "169.254.91.1/30"),
            (cable.b_node, cable.b_port_netdev, "169.254.91.2/30"))  # fmt: skip
    device = rdma_device_for(cable.a_port_netdev)
    before = textfile_xmit_bytes(device)
    try:
        for node, netdev, address in ends:
            on_node(f"sudo ip link set {netdev} up && sudo ip link set {netdev} mtu 9000 && "
                    f"sudo ip addr add {address} dev {netdev}", node=node)  # fmt: skip
        on_node(f"ping -q -c 20 -i 0.2 -W 3 -s 8000 -I {cable.a_port_netdev} 169.254.91.2")
        port_up = f'sparkrack_rdma_port_up{{device="{device}",netdev="{cable.a_port_netdev}"'
        text = poll(
            lambda: scrape(PORTS["node-exporter"]),
            lambda text: f'{port_up},port="1"}} 1' in text,
            timeout=60,
        )
        assert f'{port_up},port="1"}} 1' in text, "the configured port reads up"
        sent = 20 * 8000
        after = poll(
            lambda: str(textfile_xmit_bytes(device)),
            lambda value: float(value) >= before + sent,
            timeout=60,
        )
        assert float(after) >= before + sent, f"{device}: {before} -> {after} after {sent} B"
    finally:
        for node, netdev, _ in ends:
            on_node(f"sudo ip addr flush dev {netdev} && sudo ip link set {netdev} down && "
                    f"sudo ip link set {netdev} mtu 1500", check=False, node=node)  # fmt: skip


def test_gpu_exporter_reads_nvidia_smi_and_memory_from_meminfo(rack: SimTopology) -> None:
    text = scrape(PORTS["gpu-exporter"])
    for metric in (
        "nvidia_smi_utilization_gpu_ratio",
        "nvidia_smi_power_draw_watts",
        "nvidia_smi_temperature_gpu",
        "nvidia_smi_clocks_sm_clock_hz",
    ):
        assert samples(text, metric), f"no {metric}"
    assert 'name="NVIDIA GB10"' in text
    mem_total_kb = int(on_node("awk '/^MemTotal:/ {print $2}' /proc/meminfo"))
    [(_, total)] = samples(text, "nvidia_smi_memory_total_bytes")
    [(_, used)] = samples(text, "nvidia_smi_memory_used_bytes")
    assert total == mem_total_kb * 1024 and 0 < used < total
    assert "fan" not in text


def test_cadvisor_answers_with_container_series(rack: SimTopology) -> None:
    text = poll(
        lambda: scrape(PORTS["cadvisor"]),
        lambda text: "/user.slice" in text,
        timeout=120,
    )
    cpu = {labels for labels, _ in samples(text, "container_cpu_usage_seconds_total")}
    memory = {labels for labels, _ in samples(text, "container_memory_usage_bytes")}
    assert any('id="/"' in labels for labels in cpu)
    assert any('id="/user.slice' in labels for labels in memory), memory
    assert samples(text, "container_scrape_error") == [("", 0.0)]
    logs = on_node("podman logs cadvisor 2>&1")
    assert "Registration of the podman container factory successfully" in logs


def test_prometheus_image_has_prometheus_and_promtool(rack: SimTopology) -> None:
    for program in ("prometheus", "promtool"):
        version = on_node(f"podman run --rm --network host {PROMETHEUS_LATEST} {program} --version")
        assert version.startswith(f"{program}, version "), version


def test_prometheus_image_scrapes_the_three_exporters(rack: SimTopology) -> None:
    """The image's default command serves a config mounted at /etc/prometheus."""
    config = (
        "global: {scrape_interval: 5s, scrape_timeout: 4s}\n"
        "scrape_configs:\n"
        "- job_name: exporters\n"
        "  static_configs: [{targets: ['127.0.0.1:9100', '127.0.0.1:9835', '127.0.0.1:8080']}]\n"
    )
    on_node(f"mkdir -p $HOME/monitoring/prometheus && printf %s {shlex.quote(config)} "
            "> $HOME/monitoring/prometheus/prometheus.yml")  # fmt: skip
    on_node(
        "podman run -d --name prometheus --network host "
        f"-v $HOME/monitoring/prometheus:/etc/prometheus:ro {PROMETHEUS_LATEST}"
    )
    query = "curl -sf 'http://127.0.0.1:9090/api/v1/query?query=sum(up)'"
    answer = poll(lambda: on_node(query, check=False), lambda text: '"3"]' in text, timeout=120)
    assert '"3"]' in answer, f"stack {STACK}, node {NODE}: sum(up) = {answer}"

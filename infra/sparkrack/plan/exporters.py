"""The monitoring role's containers, as the Container resource takes them: pure, from the Plan.

Every node runs node-exporter, the nvidia-smi GPU exporter, the RDMA textfile collector and
cAdvisor; the Prometheus node runs Prometheus, and Grafana where the stack names an image. All
are rootless containers of the service user on the host network, on the housekeeping cores
(exporters must never take a compute core from inference, seed 000). The command lines are the
images' (roles/monitoring/files, sparkrack.sim.monitoring_images): node-exporter with the node's
/ at /host (so `mountpoint="/"`, seed 001) and the textfile directory the RDMA collector writes.

Where things live on the node (the textfile directory, Prometheus's config and data) is the
stack's `roles.monitoring` (plan.paths): this module takes them as `MonitoringPaths`.
"""

from __future__ import annotations

import hashlib
import posixpath

from sparkrack.plan.containers import ContainerPlan
from sparkrack.plan.model import NodePlan, Plan
from sparkrack.plan.paths import MonitoringPaths
from sparkrack.text.cpus import CpuList

NODE_EXPORTER = "node-exporter"
GPU_EXPORTER = "gpu-exporter"
RDMA_TEXTFILE = "rdma-textfile"
CADVISOR = "cadvisor"
PROMETHEUS = "prometheus"
GRAFANA = "grafana"
# Inside the containers: fixed by the images and by H1's config (sparkrack.monitoring).
HOST_ROOT = "/host"
TEXTFILE = "/textfile"
ENGINE_DATA = "/engine-data"  # in the RDMA collector: the mount holding the engine log
PROMETHEUS_CONFIG_DIR = "/etc/prometheus"
PROMETHEUS_DATA_DIR = "/prometheus"
GRAFANA_PROVISIONING_DIR = "/etc/grafana/provisioning"
GRAFANA_DASHBOARDS_DIR = "/var/lib/grafana/dashboards"
PODMAN_SOCKET = "/run/podman/podman.sock"
NVIDIA_SMI = "/usr/bin/nvidia-smi"
INFINIBAND_SYSFS = "/sys/class/infiniband"
# The podman secret Grafana's admin password is created as (from stdin, never a file).
GRAFANA_SECRET = "sparkrack-grafana-admin"
# node-exporter's default --collector.filesystem.fs-types-exclude less `overlay`: a simulated
# node's / is the overlay of its container and would have no mountpoint="/" (a real GB10's / is
# ext4; rootless containers' overlays live in their own mount namespaces and do not show).
FS_TYPES_EXCLUDE = (
    "^(autofs|binfmt_misc|bpf|cgroup2?|configfs|debugfs|devpts|devtmpfs|fusectl|hugetlbfs|"
    "iso9660|mqueue|nsfs|proc|procfs|pstore|rpc_pipefs|securityfs|selinuxfs|squashfs|erofs|"
    "sysfs|tracefs)$"
)


def volume(source: str, destination: str, mode: str = "ro") -> str:
    return f"--volume={source}:{destination}:{mode}"


def housekeeping(node: NodePlan) -> CpuList:
    return node.cpus.cpuset(node.cpus.housekeeping)


def node_exporter(plan: Plan, node: NodePlan, paths: MonitoringPaths) -> ContainerPlan:
    command = (
        "prometheus-node-exporter",
        f"--path.rootfs={HOST_ROOT}",
        f"--web.listen-address={node.listener('node-exporter').host_port}",
        f"--collector.textfile.directory={TEXTFILE}",
        f"--collector.filesystem.fs-types-exclude={FS_TYPES_EXCLUDE}",
        *plan.monitoring.node_exporter_args,
    )
    return ContainerPlan(
        restart="always",
        name=NODE_EXPORTER,
        image=plan.monitoring.exporters_image,
        command=command,
        cpuset=housekeeping(node),
        # The node's PID namespace: the filesystem collector reads /proc/1/mountinfo, the node's
        # mounts (upstream's recommended way, with / at /host, ro and following submounts).
        options=(
            "--pid=host",
            volume("/", HOST_ROOT, "ro,rslave"),
            volume(paths.textfile, TEXTFILE),
        ),
    )


def gpu_exporter(plan: Plan, node: NodePlan) -> ContainerPlan:
    """nvidia-smi based; on unified memory (GB10) GPU memory is read from the node's meminfo."""
    command = (
        "python3",
        "/opt/sparkrack/gpu_exporter.py",
        "--listen-address",
        node.listener("gpu-exporter").host_port,
        "--nvidia-smi",
        NVIDIA_SMI,
        "--meminfo",
        f"{HOST_ROOT}/proc/meminfo",
    )
    # With CDI, the spec brings nvidia-smi, the driver's libraries and the device nodes; without
    # a GPU (a simulated node) only the node's nvidia-smi stand-in is mounted.
    gpus = node.gpu_access.container_devices()
    smi = () if gpus else (volume(NVIDIA_SMI, NVIDIA_SMI),)
    return ContainerPlan(
        restart="always",
        name=GPU_EXPORTER,
        image=plan.monitoring.exporters_image,
        command=command,
        cpuset=housekeeping(node),
        devices=gpus,
        options=(volume("/proc/meminfo", f"{HOST_ROOT}/proc/meminfo"), *smi),
    )


def rdma_textfile(plan: Plan, node: NodePlan, paths: MonitoringPaths) -> ContainerPlan:
    """RoCE bypasses node_network_*: the ports' counters (4-byte words) as a textfile. On the
    head, also NCCL's transport from the engine log, where Ray brings every rank's lines."""
    command: tuple[str, ...] = (
        "python3",
        "/opt/sparkrack/rdma_textfile.py",
        "--sysfs",
        INFINIBAND_SYSFS,
        "--output",
        f"{TEXTFILE}/rdma.prom",
        "--interval",
        str(plan.monitoring.rdma_interval_s),
    )
    # The container's own /sys lacks the node's infiniband tree (a mount of its own).
    options: tuple[str, ...] = (
        volume(INFINIBAND_SYSFS, INFINIBAND_SYSFS),
        volume(paths.textfile, TEXTFILE, "rw"),
    )
    if node.name == plan.serving.api_node:
        below = posixpath.relpath(paths.engine_log, paths.engine_log_mount)
        if below.startswith(".."):
            raise ValueError(f"{paths.engine_log} is not below {paths.engine_log_mount}")
        command += ("--engine-log", posixpath.join(ENGINE_DATA, below))
        options += (volume(paths.engine_log_mount, ENGINE_DATA),)
    return ContainerPlan(
        restart="always",
        name=RDMA_TEXTFILE,
        image=plan.monitoring.exporters_image,
        command=command,
        cpuset=housekeeping(node),
        options=options,
    )


def cadvisor(plan: Plan, node: NodePlan, paths: MonitoringPaths) -> ContainerPlan:
    """The service user's containers, through its Podman socket; the node's cgroup tree (the
    container's own cgroup mount is rooted at its own, empty cgroup); the machine id for the
    machine_* labels. The options that work rootless in a simulated node on a cgroup v1 host
    (sparkrack.sim.monitoring_images, tests/e2e/test_monitoring_images.py)."""
    command = (
        "/usr/local/bin/cadvisor",
        f"--listen_ip={node.listener('cadvisor').address}",
        f"--port={node.listener('cadvisor').port}",
        f"--podman=unix://{PODMAN_SOCKET}",
        "--housekeeping_interval=10s",
    )
    return ContainerPlan(
        restart="always",
        name=CADVISOR,
        image=plan.monitoring.exporters_image,
        command=command,
        cpuset=housekeeping(node),
        options=(
            volume("/sys/fs/cgroup", "/sys/fs/cgroup", "ro,rslave"),
            volume("/etc/machine-id", "/etc/machine-id"),
            volume(paths.podman_socket, PODMAN_SOCKET, "rw"),
        ),
    )


def exporter_containers(
    plan: Plan, node: NodePlan, paths: MonitoringPaths
) -> tuple[ContainerPlan, ...]:
    """Every node's four, in start order: the collector before node-exporter reads its file."""
    return (
        rdma_textfile(plan, node, paths),
        node_exporter(plan, node, paths),
        gpu_exporter(plan, node),
        cadvisor(plan, node, paths),
    )


def files_digest(files: dict[str, str]) -> str:
    """sha256 over the relative paths and contents: a container whose env carries it restarts
    when any of its configuration files changes."""
    digest = hashlib.sha256()
    for path in sorted(files):
        digest.update(f"{path}\0{files[path]}\0".encode())
    return digest.hexdigest()


def prometheus(
    plan: Plan, node: NodePlan, paths: MonitoringPaths, config_digest: str
) -> ContainerPlan:
    """Runs as the container's root (the service user on the node): the data directory is the
    user's, whatever user the image names."""
    command = (
        "prometheus",
        f"--config.file={PROMETHEUS_CONFIG_DIR}/prometheus.yml",
        f"--storage.tsdb.path={PROMETHEUS_DATA_DIR}",
        f"--web.listen-address={node.listener('prometheus').host_port}",
    )
    return ContainerPlan(
        restart="always",
        name=PROMETHEUS,
        image=plan.monitoring.prometheus_image,
        command=command,
        env={"SPARKRACK_CONFIG_SHA256": config_digest},
        cpuset=housekeeping(node),
        options=(
            "--user=0:0",
            volume(paths.prometheus_config, PROMETHEUS_CONFIG_DIR),
            volume(paths.prometheus_data, PROMETHEUS_DATA_DIR, "rw"),
        ),
    )


def grafana(
    plan: Plan, node: NodePlan, paths: MonitoringPaths, config_digest: str
) -> ContainerPlan:
    """Bound to the management address only, never the fabric; the admin password comes from a
    podman secret, never from the unit file or the environment written on disk."""
    if plan.monitoring.grafana_image is None:
        raise ValueError(f"stack {plan.stack}: monitoring.grafana_image is not set")
    env = {
        "GF_SERVER_HTTP_ADDR": node.address,
        "GF_SERVER_HTTP_PORT": str(plan.monitoring.grafana_port),
        "GF_SECURITY_ADMIN_USER": "admin",
        "GF_USERS_ALLOW_SIGN_UP": "false",
        "GF_ANALYTICS_REPORTING_ENABLED": "false",
        "GF_ANALYTICS_CHECK_FOR_UPDATES": "false",
        "SPARKRACK_CONFIG_SHA256": config_digest,
    }
    return ContainerPlan(
        restart="always",
        name=GRAFANA,
        image=plan.monitoring.grafana_image,
        command=(),
        env=env,
        cpuset=housekeeping(node),
        options=(
            f"--secret={GRAFANA_SECRET},type=env,target=GF_SECURITY_ADMIN_PASSWORD",
            volume(f"{paths.grafana}/provisioning", GRAFANA_PROVISIONING_DIR),
            volume(f"{paths.grafana}/dashboards", GRAFANA_DASHBOARDS_DIR),
        ),
    )

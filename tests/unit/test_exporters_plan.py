"""The monitoring role's container command lines (sparkrack.plan.exporters), golden on sim-2."""

from __future__ import annotations

import re

import pytest

from sparkrack.plan.exporters import (
    FS_TYPES_EXCLUDE,
    exporter_containers,
    files_digest,
    grafana,
    node_exporter,
    prometheus,
)
from sparkrack.plan.paths import MonitoringPaths
from sparkrack.text.cpus import CpuList
from tests.unit.support import cluster, plan_of

pytestmark = pytest.mark.unit

PATHS = MonitoringPaths(
    textfile="/home/sparkrack/.local/share/sparkrack/textfile",
    prometheus_config="/home/sparkrack/.config/sparkrack/prometheus",
    prometheus_data="/home/sparkrack/.local/share/sparkrack/prometheus",
    grafana="/home/sparkrack/.config/sparkrack/grafana",
    engine_log="/home/sparkrack/.local/share/sparkrack/engine/vllm.log",
    engine_log_mount="/home/sparkrack/.local/share/sparkrack",
)
SIM2 = plan_of("sim-2", cluster("sim-2"))
NODE = SIM2.node("spark-2")


def test_node_exporter_command_line() -> None:
    spec = node_exporter(SIM2, NODE, PATHS)
    assert spec.command == (
        "prometheus-node-exporter",
        "--path.rootfs=/host",
        "--web.listen-address=198.18.0.12:9100",  # the management address, never a wildcard
        "--collector.textfile.directory=/textfile",
        f"--collector.filesystem.fs-types-exclude={FS_TYPES_EXCLUDE}",
        *SIM2.monitoring.node_exporter_args,  # the Plan's named set, after these
    )
    assert spec.options == (
        "--pid=host",
        "--volume=/:/host:ro,rslave",
        "--volume=/home/sparkrack/.local/share/sparkrack/textfile:/textfile:ro",
    )
    assert SIM2.monitoring.node_exporter_args[0] == "--collector.disable-defaults"
    assert spec.image == "localhost/sparkrack/exporters:latest"


def test_node_exporter_keeps_overlay_so_a_simulated_root_is_slash() -> None:
    excluded = re.compile(FS_TYPES_EXCLUDE)
    assert not excluded.match("overlay") and not excluded.match("ext4")
    assert excluded.match("proc") and excluded.match("tmpfs") is None
    assert excluded.match("cgroup2") and not excluded.match("sysfs2")


def test_node_exporter_never_runs_the_collectors_that_hung() -> None:
    for node in SIM2.nodes:
        command = node_exporter(SIM2, node, PATHS).command
        assert "--collector.textfile" in command
        assert not [arg for arg in command if "infiniband" in arg or "cpufreq" in arg]
        assert "--web.max-requests" not in " ".join(command)  # its default, 40


def test_every_exporter_on_the_housekeeping_cores() -> None:
    names = [spec.name for spec in exporter_containers(SIM2, NODE, PATHS)]
    assert names == ["rdma-textfile", "node-exporter", "gpu-exporter", "cadvisor"]
    for spec in exporter_containers(SIM2, NODE, PATHS):
        assert spec.cpuset == NODE.cpus.housekeeping == CpuList.parse("0"), spec.name


def test_the_heads_collector_reads_the_engine_log_for_the_nccl_transport() -> None:
    rdma = exporter_containers(SIM2, SIM2.node(SIM2.serving.api_node), PATHS)[0]
    assert rdma.command[-2:] == ("--engine-log", "/engine-data/engine/vllm.log")
    assert "--volume=/home/sparkrack/.local/share/sparkrack:/engine-data:ro" in rdma.options
    assert "--engine-log" not in exporter_containers(SIM2, NODE, PATHS)[0].command  # a worker


def test_collector_command_lines() -> None:
    rdma, _, gpu, cadvisor = exporter_containers(SIM2, NODE, PATHS)
    assert rdma.command == (
        "python3", "/opt/sparkrack/rdma_textfile.py", "--sysfs", "/sys/class/infiniband",
        "--output", "/textfile/rdma.prom", "--interval", "5",
    )  # fmt: skip
    assert "--volume=/home/sparkrack/.local/share/sparkrack/textfile:/textfile:rw" in rdma.options
    assert gpu.command == (
        "python3", "/opt/sparkrack/gpu_exporter.py", "--listen-address", "198.18.0.12:9835",
        "--nvidia-smi", "/usr/bin/nvidia-smi", "--meminfo", "/host/proc/meminfo",
    )  # fmt: skip
    # The simulated GB10 gets its GPU as a real one does: the CDI spec brings nvidia-smi.
    assert gpu.devices == ("nvidia.com/gpu=all",)
    assert gpu.options == ("--volume=/proc/meminfo:/host/proc/meminfo:ro",)
    assert cadvisor.command[:3] == (
        "/usr/local/bin/cadvisor",
        "--listen_ip=198.18.0.12",
        "--port=8080",
    )
    assert cadvisor.options == (
        "--volume=/sys/fs/cgroup:/sys/fs/cgroup:ro,rslave",
        "--volume=/etc/machine-id:/etc/machine-id:ro",
        "--volume=%t/podman/podman.sock:/run/podman/podman.sock:rw",
    )


def test_ports_follow_the_stack() -> None:
    raw = cluster("sim-2")
    raw["monitoring"]["node_exporter_port"] = 9200
    raw["monitoring"]["cadvisor_port"] = 8088
    plan = plan_of("sim-2", raw)
    _, exporter, _, cadvisor = exporter_containers(plan, plan.node("spark-1"), PATHS)
    assert "--web.listen-address=198.18.0.11:9200" in exporter.command
    assert "--port=8088" in cadvisor.command


def test_prometheus_command_line_and_config_digest() -> None:
    head = SIM2.node("spark-1")
    spec = prometheus(SIM2, head, PATHS, "abc")
    assert spec.command == (
        "prometheus",
        "--config.file=/etc/prometheus/prometheus.yml",
        "--storage.tsdb.path=/prometheus",
        "--web.listen-address=198.18.0.11:9090",
    )
    assert spec.env == {"SPARKRACK_CONFIG_SHA256": "abc"}
    assert "--volume=/home/sparkrack/.config/sparkrack/prometheus:/etc/prometheus:ro" in (
        spec.options
    )
    assert spec.image == "localhost/sparkrack/prometheus:latest"


def test_files_digest_changes_with_any_file() -> None:
    files = {"prometheus.yml": "a", "rules/sparkrack.rules.yml": "b"}
    assert files_digest(files) != files_digest({**files, "prometheus.yml": "a2"})
    assert files_digest(files) != files_digest({"prometheus.yml": "a"})
    assert files_digest(files) == files_digest(dict(reversed(files.items())))


def test_grafana_binds_the_management_address_and_reads_a_podman_secret() -> None:
    raw = cluster("gb10-2")
    plan = plan_of("gb10-2", raw)
    head = plan.node(plan.head_node)
    spec = grafana(plan, head, PATHS, "abc")
    assert spec.env["GF_SERVER_HTTP_ADDR"] == head.address
    assert not [
        link
        for link in head.links
        if link.address and spec.env["GF_SERVER_HTTP_ADDR"] in link.address
    ]  # never the fabric
    assert "GF_SECURITY_ADMIN_PASSWORD" not in spec.env
    assert (
        "--secret=sparkrack-grafana-admin,type=env,target=GF_SECURITY_ADMIN_PASSWORD"
        in spec.options
    )


def test_grafana_without_an_image_is_refused() -> None:
    with pytest.raises(ValueError, match=r"monitoring\.grafana_image is not set"):
        grafana(SIM2, SIM2.node("spark-1"), PATHS, "abc")

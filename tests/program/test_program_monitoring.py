"""The monitoring role's resource graph under Pulumi's mocks: what runs where, in what order."""

from __future__ import annotations

from typing import Any

import pytest

from .harness import deployable_cluster, run_program, stack_cluster

pytestmark = pytest.mark.program

EXPORTERS = ("node-exporter", "gpu-exporter", "rdma-textfile", "cadvisor")


def by_name(stack: str) -> dict[str, Any]:
    return {r.name: r for r in run_program(stack, deployable_cluster(stack)).mocks.resources}


def test_sim2_runs_the_exporters_everywhere_and_prometheus_on_the_head() -> None:
    found = by_name("sim-2")
    containers = sorted(name for name, r in found.items() if r.typ.endswith(":Container"))
    for node in ("spark-1", "spark-2"):
        assert {f"{node}-{name}" for name in EXPORTERS} <= set(containers)
    assert "spark-1-prometheus" in containers
    assert "spark-2-prometheus" not in containers
    assert not [name for name in containers if "grafana" in name]  # sim: no Grafana image


def test_sim2_exporters_run_on_the_housekeeping_cores() -> None:
    found = by_name("sim-2")
    for name in EXPORTERS:
        assert found[f"spark-1-{name}"].inputs["cpuset"] == "0"
    assert found["spark-1-prometheus"].inputs["cpuset"] == "0"


def test_sim2_loads_the_exporters_here_and_ships_them_from_the_head() -> None:
    found = by_name("sim-2")
    assert found["spark-1-exporters-image"].typ.endswith(":ControlImage")
    assert found["spark-1-prometheus-image"].typ.endswith(":ControlImage")
    shipped = found["spark-2-exporters-image"].inputs
    assert shipped["source"]["node"] == "spark-1"
    assert shipped["source"]["to"].startswith("198.19.")  # over the fabric


def test_sim2_writes_prometheus_and_grafana_files_to_the_head() -> None:
    found = by_name("sim-2")
    paths = sorted(r.inputs["path"] for r in found.values() if r.typ.endswith(":RemoteFile"))
    prometheus = "/home/sparkrack/.config/sparkrack/prometheus/"
    assert f"{prometheus}prometheus.yml" in paths
    assert f"{prometheus}rules/sparkrack.rules.yml" in paths
    grafana = "/home/sparkrack/.config/sparkrack/grafana/"
    assert f"{grafana}provisioning/datasources/sparkrack.yaml" in paths
    assert any(p.startswith(f"{grafana}dashboards/") and p.endswith(".json") for p in paths)
    digest = found["spark-1-prometheus"].inputs["env"]["SPARKRACK_CONFIG_SHA256"]
    assert len(digest) == 64


def test_prometheus_restarts_when_its_configuration_changes() -> None:
    cluster = stack_cluster("sim-2")
    before = run_program("sim-2", cluster).mocks.resources
    cluster["monitoring"]["scrape_interval_s"] = 30
    after = run_program("sim-2", cluster).mocks.resources

    def env(resources: list[Any]) -> str:
        found = next(r for r in resources if r.name == "spark-1-prometheus")
        return str(found.inputs["env"]["SPARKRACK_CONFIG_SHA256"])

    assert env(before) != env(after)


def test_gb10_2_without_the_password_skips_only_the_grafana_container() -> None:
    found = by_name("gb10-2")
    assert "spark-1-grafana" not in found
    assert "spark-1-prometheus" in found
    assert found["spark-1-exporters-image"].typ.endswith(":Image")
    containerfile = found["spark-1-exporters-image"].inputs["containerfile"]
    assert "prometheus-node-exporter" in containerfile
    assert "/opt/sparkrack/rdma_textfile.py" in containerfile
    # Debian trixie packages no cadvisor: a Go stage compiles tools/cadvisor.
    assert "FROM docker.io/library/golang:1.26.8-trixie AS cadvisor" in containerfile
    assert "COPY --from=cadvisor /cadvisor /usr/local/bin/cadvisor" in containerfile
    assert "version.Version=v0.53.0" in containerfile
    assert " cadvisor " not in containerfile.split("apt-get install", 1)[1].split("\n\n")[0]
    assert "$" + "{" not in containerfile and "$golang_image" not in containerfile

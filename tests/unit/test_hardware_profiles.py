"""The GPU-server profiles (issue 36): every figure sourced, and the planner answers for each."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sparkrack import catalog
from sparkrack.cli import main
from sparkrack.config.load import spec_for_estimate
from sparkrack.estimate.calibration import shipped_rows
from sparkrack.plan import estimate
from sparkrack.stackspec import HardwareProfile

pytestmark = pytest.mark.unit

SERVERS = ("h100-8", "h200-8", "b200-8", "h20-8")
ROW_IDS = {row.id for row in shipped_rows()}


def profile(name: str) -> HardwareProfile:
    entry = catalog.entry("hardware", name)
    assert entry is not None
    return HardwareProfile.model_validate(entry)


@pytest.mark.parametrize("name", SERVERS)
def test_each_server_figure_the_planner_uses_names_its_source(name: str) -> None:
    text = Path(catalog.data_path(f"hardware/{name}.yaml")).read_text()
    server = profile(name)

    assert server.gpus == 8 and server.nvlink_gb_s is not None
    assert "source" in text.lower() and "https://" in text
    # power is a rating, never a measurement: the file says which kind of number it is
    assert "CEILING" in text or "DERIVED" in text


def test_the_servers_differ_where_their_datasheets_do() -> None:
    bandwidth = {name: profile(name).memory_bandwidth_gb_s for name in SERVERS}
    memory = {name: int(profile(name).gpu_memory) for name in SERVERS}

    assert bandwidth == {"h100-8": 3350, "h200-8": 4800, "b200-8": 8000, "h20-8": 4000}
    assert memory == {"h100-8": 80e9, "h200-8": 141e9, "b200-8": 180e9, "h20-8": 96e9}
    assert profile("b200-8").nvlink_gb_s == 2 * (profile("h100-8").nvlink_gb_s or 0)
    assert profile("b200-8").assumed_power_watts > profile("h200-8").assumed_power_watts


@pytest.mark.parametrize(("name", "fits"), [("h100-8", False), ("h20-8", False), ("b200-8", True)])
def test_kimi_k3_on_two_servers_fits_where_the_memory_adds_up(name: str, fits: bool) -> None:
    # 1.84 TB needed (seed 002): 2 x 8 x 80 GB and 2 x 8 x 96 GB fall short, 2 x 8 x 180 GB do not
    result = estimate(spec_for_estimate(hardware=name, nodes=2, model="kimi-k3"))

    assert result.fit.fits is fits
    assert result.performance.decode_tok_s_expected > 0


@pytest.mark.parametrize("name", SERVERS)
def test_estimate_answers_for_each_server_from_one_stream_to_64(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["estimate", "--model", "minimax-m2.7-awq", "--hardware", name, "--json"]
    answers = {}
    for streams in (1, 64):
        assert main([*argv, "--concurrency", str(streams)]) == 0
        answers[streams] = json.loads(capsys.readouterr().out)

    one, many = answers[1], answers[64]
    assert one["decode_tok_s_low"] < one["decode_tok_s_expected"] < one["decode_tok_s_high"]
    assert one["leans_on"] and all(row in ROW_IDS for row in one["leans_on"])
    assert many["concurrency"]["per_request_tok_s"] < one["concurrency"]["per_request_tok_s"]
    assert many["concurrency"]["aggregate_tok_s"] > one["concurrency"]["aggregate_tok_s"]
    assert one["concurrency"]["per_request_tok_s"] == one["decode_tok_s_expected"]


def test_faster_memory_decodes_faster_where_weights_dominate() -> None:
    # A dense 27B model at batch 1 is bandwidth-bound: the servers order as their bandwidth.
    speed = {
        name: estimate(
            spec_for_estimate(hardware=name, nodes=1, model="gemma-3-27b-fp8")
        ).performance.decode_tok_s_expected
        for name in SERVERS
    }

    assert speed["h100-8"] < speed["h20-8"] < speed["h200-8"] < speed["b200-8"]


# Dense tensor TFLOPS per GPU: each a datasheet's "with sparsity" figure halved, or derived from
# one, with the source in the profile's comment.
DENSE_TFLOPS = {
    "gb10": {"fp4": 500, "fp8": 250, "bf16": 125},
    "gx10": {"fp4": 500, "fp8": 250, "bf16": 125},
    "h100-8": {"fp8": 1979, "bf16": 989.5},
    "h200-8": {"fp8": 1979, "bf16": 989.5},
    "h20-8": {"fp8": 296, "bf16": 148},
    "b200-8": {"fp4": 9000, "fp8": 4500, "bf16": 2250},
    "gb200-4": {"fp4": 10000, "fp8": 5000, "bf16": 2500},
}


@pytest.mark.parametrize("name", sorted(DENSE_TFLOPS))
def test_each_profile_names_its_dense_tensor_tflops_and_their_source(name: str) -> None:
    text = Path(catalog.data_path(f"hardware/{name}.yaml")).read_text()
    comment = text[text.index("# Compute") : text.index("tensor_tflops:")]

    assert profile(name).tensor_tflops == DENSE_TFLOPS[name]
    assert "https://" in comment
    assert "sparsity" in comment.lower() or "dense" in comment.lower()


def test_the_gb200_tray_is_four_gpus_with_every_figure_sourced_and_its_gaps_said() -> None:
    text = Path(catalog.data_path("hardware/gb200-4.yaml")).read_text()
    tray = profile("gb200-4")

    assert tray.gpus == 4 and len(tray.ports) == 4
    assert int(tray.gpu_memory) == 186e9 and tray.memory_bandwidth_gb_s == 8000
    assert tray.nvlink_gb_s == 900 and tray.cpus.count == 144
    assert "mlcommons/inference_results" in text  # the MLPerf system file: GPUs, memory, cores
    assert "CEILING" in text and "SECONDARY" in text and "DERIVED" in text
    assert "NOT MODELLED" in text  # NVLink between the trays of one rack


def test_estimate_answers_for_the_gb200_tray(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["estimate", "--model", "kimi-k3", "--hardware", "gb200-4", "--nodes", "3", "--json"]

    assert main([*argv, "--concurrency", "16"]) == 0
    result = json.loads(capsys.readouterr().out)

    # 3 trays x 4 x 186 GB = 2.2 TB hold K3's 1.84 TB runtime budget (seed 002); 2 trays do not
    assert result["fits"] and result["tensor_parallel_size"] == 4
    assert result["compute_precision"] == "fp4" and result["tensor_tflops"] == 10000
    assert result["concurrency"]["aggregate_tok_s"] > result["decode_tok_s_expected"]
    two = estimate(spec_for_estimate(hardware="gb200-4", nodes=2, model="kimi-k3"))
    assert not two.fit.fits

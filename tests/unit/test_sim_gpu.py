"""The simulated GPU is seen only through its device nodes, as the real one is: by the engine
stand-in (cuda.py), by nvidia-smi, and by nvidia-ctk, whose CDI spec reads as the real one's."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sparkrack.facts.gpu import parse_cdi_spec
from sparkrack.sim import nvidia_ctk
from sparkrack.sim.nvidia_smi import DRIVER_VERSION, NO_DEVICE, NO_DRIVER, driver_refusal
from sparkrack.sim.standin.cuda import no_gpu_refusal, visible_gpus

from .support import gpu_device_nodes

pytestmark = pytest.mark.unit

UUID = "GPU-6b3c0d7e-2f4a-5e1b-9c8d-0a1b2c3d4e5f"


def test_cuda_sees_a_gpu_only_with_the_control_node_and_the_device(tmp_path: Path) -> None:
    assert visible_gpus(tmp_path) == []
    refusal = no_gpu_refusal(tmp_path)
    assert refusal is not None and refusal.startswith("RuntimeError: No CUDA GPUs are available")
    assert f"no {tmp_path}/nvidiactl" in refusal and "--device nvidia.com/gpu=all" in refusal
    gpu_device_nodes(tmp_path, ("nvidiactl",))
    assert f"no {tmp_path}/nvidia0" in str(no_gpu_refusal(tmp_path))
    gpu_device_nodes(tmp_path, ("nvidia0", "nvidia-uvm", "nvidia-modeset"))
    assert visible_gpus(tmp_path) == [0]
    assert no_gpu_refusal(tmp_path) is None


def test_cuda_takes_no_regular_file_for_a_device(tmp_path: Path) -> None:
    for name in ("nvidiactl", "nvidia0"):
        (tmp_path / name).write_text("")
    assert visible_gpus(tmp_path) == []


def test_nvidia_smi_answers_as_the_real_one_without_its_devices(tmp_path: Path) -> None:
    assert driver_refusal(tmp_path) == NO_DRIVER
    assert NO_DRIVER[1] == 9 and "couldn't communicate with the NVIDIA driver" in NO_DRIVER[0]
    gpu_device_nodes(tmp_path, ("nvidiactl",))
    assert driver_refusal(tmp_path) == NO_DEVICE == ("No devices were found\n", 6)
    gpu_device_nodes(tmp_path, ("nvidia0",))
    assert driver_refusal(tmp_path) is None


@pytest.fixture
def node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A node's root with the driver's libraries (and one that is not the driver's), its devices,
    and an nvidia-smi that lists one GPU."""
    lib = tmp_path / "usr/lib/aarch64-linux-gnu"
    lib.mkdir(parents=True)
    for name in ("libcuda.so", "libnvidia-ml.so", "libnvidia-ptxjitcompiler.so"):
        (lib / f"{name}.{DRIVER_VERSION}").write_text("")
    (lib / "libc.so.6").write_text("")
    dev = gpu_device_nodes(tmp_path / "dev", ("nvidiactl", "nvidia0", "nvidia-uvm"))
    monkeypatch.setattr(nvidia_ctk, "DEV", dev)
    monkeypatch.setattr(nvidia_ctk, "BINARIES", ())

    def fake_smi(args: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        assert args[0] == "nvidia-smi"
        return subprocess.CompletedProcess(args, 0, f"0, {UUID}\n", "")

    monkeypatch.setattr(subprocess, "run", fake_smi)  # what nvidia_ctk asks NVML through
    return tmp_path


def test_nvidia_ctk_writes_a_spec_the_product_reads_as_a_gb10s(node: Path) -> None:
    version, libraries = nvidia_ctk.driver_libraries(node)
    assert version == DRIVER_VERSION
    assert sorted(p.name for p in libraries) == sorted(
        f"{n}.{DRIVER_VERSION}"
        for n in ("libcuda.so", "libnvidia-ml.so", "libnvidia-ptxjitcompiler.so")
    )
    control = [str(node / "dev" / n) for n in ("nvidia-uvm", "nvidiactl")]
    spec = nvidia_ctk.render_spec(nvidia_ctk.gpu_uuids(), control, [str(p) for p in libraries])
    read = parse_cdi_spec(spec)
    assert read is not None
    assert read.kind == "nvidia.com/gpu"
    assert read.devices == ("nvidia.com/gpu=0", f"nvidia.com/gpu={UUID}", "nvidia.com/gpu=all")
    assert read.driver == DRIVER_VERSION


def test_nvidia_ctk_refuses_without_a_driver_library(tmp_path: Path) -> None:
    with pytest.raises(nvidia_ctk.GenerateError, match="ERROR_LIBRARY_NOT_FOUND"):
        nvidia_ctk.driver_libraries(tmp_path)


def test_nvidia_ctk_output_gets_a_spec_extension_as_the_real_one_does() -> None:
    assert nvidia_ctk.output_path(["--output=/etc/cdi/nvidia.yaml"]) == "/etc/cdi/nvidia.yaml"
    assert nvidia_ctk.output_path(["--output", "/tmp/x/nvidia"]) == "/tmp/x/nvidia.yaml"
    assert nvidia_ctk.output_path([]) is None


def test_nvidia_ctk_version_reads_as_the_toolkit_fact_expects() -> None:
    done = subprocess.run(
        [sys.executable, nvidia_ctk.__file__, "--version"], capture_output=True, text=True
    )
    assert done.returncode == 0
    assert done.stdout.startswith("NVIDIA Container Toolkit CLI version 1.18.0\n")

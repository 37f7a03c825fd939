"""The engine is a stack setting: a real rack runs the release its stack names, built the way
the stack says; a moving tag is refused unless the stack accepts it."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from sparkrack.config.load import refuse_undeployable, spec_from_config
from sparkrack.stackspec.errors import SpecError
from sparkrack.stackspec.serving import is_pinned

from .support import STACKS, cluster, named_model, plan_of, refusal


def undeployable(stack: str, raw: dict[str, Any]) -> str:
    with pytest.raises(SpecError) as refused:
        refuse_undeployable(spec_from_config(stack, raw, base_dir=STACKS))
    return str(refused.value)


@pytest.mark.parametrize(
    ("reference", "pinned"),
    [
        ("docker.io/vllm/vllm-openai:v0.26.1", True),
        ("localhost:5000/vllm-ray:0.26.1", True),
        (f"vllm/vllm-openai@sha256:{'a' * 64}", True),
        (f"vllm/vllm-openai:nightly@sha256:{'a' * 64}", True),
        ("docker.io/vllm/vllm-openai:nightly", False),
        ("docker.io/vllm/vllm-openai:latest", False),
        ("docker.io/vllm/vllm-openai", False),
        ("localhost:5000/vllm-ray", False),  # a registry port is not a tag
    ],
)
def test_a_pin_is_a_release_tag_or_a_digest(reference: str, pinned: bool) -> None:
    assert is_pinned(reference) is pinned


def test_every_shipped_real_stack_pins_its_engine_and_its_build_base() -> None:
    for stack in ("gb10-2", "gb10-16", "h200-2"):
        engine = plan_of(stack, named_model(stack)).serving
        assert is_pinned(engine.image), stack
        assert engine.engine_build is not None and is_pinned(engine.engine_build.base), stack


def test_an_unpinned_engine_on_a_real_stack_is_refused_unless_accepted() -> None:
    raw = named_model("gb10-2")
    raw["serving"]["engine"]["build"]["base"] = "docker.io/vllm/vllm-openai:nightly"
    message = undeployable("gb10-2", raw)
    assert "serving.engine.build.base: docker.io/vllm/vllm-openai:nightly is not pinned" in message
    raw["serving"]["engine"]["accept_unpinned"] = True
    refuse_undeployable(spec_from_config("gb10-2", raw, base_dir=STACKS))


def test_a_simulated_stack_may_run_the_latest_stand_in() -> None:
    refuse_undeployable(spec_from_config("sim-2", cluster("sim-2"), base_dir=STACKS))


def test_the_old_image_keys_say_where_they_went() -> None:
    raw = cluster("gb10-2")
    raw["serving"]["image"] = raw["serving"]["engine"].pop("image")
    message = refusal("gb10-2", raw)
    assert "serving.image is now serving.engine.image" in message


def test_a_build_needs_its_base_and_versions() -> None:
    raw = cluster("gb10-2")
    del raw["serving"]["engine"]["build"]
    assert "source: build needs `build`" in refusal("gb10-2", raw)


def test_the_head_builds_from_the_stacks_base_checks_its_vllm_and_pins_ray() -> None:
    containerfile = plan_of("gb10-2", named_model("gb10-2")).serving.containerfile
    lines = containerfile.splitlines()
    assert "FROM docker.io/vllm/vllm-openai:v0.27.1" in lines
    assert "v == '0.27.1'" in containerfile  # a base carrying another vLLM fails the build
    assert 'RUN pip install --no-cache-dir "ray[default]==2.54.1"' in lines
    assert plan_of("sim-2", cluster("sim-2")).serving.containerfile == ""


@pytest.mark.parametrize(
    ("carried", "passes"), [("0.27.1", True), ("0.27.1+cu130", True), ("0.13.0", False)]
)
def test_the_builds_vllm_check_runs(carried: str, passes: bool, tmp_path: Path) -> None:
    """The Containerfile's check, run here against a stand-in `vllm` module of that version."""
    containerfile = plan_of("gb10-2", named_model("gb10-2")).serving.containerfile
    (check,) = [line for line in containerfile.splitlines() if line.startswith("RUN python3 -c")]
    (tmp_path / "vllm.py").write_text(f"__version__ = {carried!r}\n")
    done = subprocess.run(
        ["sh", "-c", check.removeprefix("RUN ")], cwd=tmp_path, capture_output=True, text=True
    )
    assert (done.returncode == 0) is passes, done.stderr
    if not passes:
        assert f"carries vLLM {carried}, the stack says 0.27.1" in done.stderr


def test_the_plan_says_when_a_gb10_stack_asks_more_memory_than_seed_001_ran() -> None:
    """Seed 001 ran two GB10 at 0.80: the memory is unified with the OS and Ray's store."""
    two = plan_of("sim-2", cluster("sim-2")).serving.hardware_notes
    assert two[0].startswith("gb10-sim: seed 001")  # at 0.80: nothing to say of the memory
    sixteen = plan_of("sim-16", cluster("sim-16")).serving.hardware_notes
    assert sixteen[0].startswith("gb10-sim: gpu_memory_utilization 0.85 is above the 0.8")
    assert any("Marlin" in note and "seed 001" in note for note in sixteen)


def test_a_server_profile_without_a_ceiling_takes_what_the_stack_asks() -> None:
    raw = named_model("h200-2")
    raw["serving"]["gpu_memory_utilization"] = 0.95
    assert plan_of("h200-2", raw).serving.hardware_notes == ()

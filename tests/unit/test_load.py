"""Loading: stack files, catalogue names, model files, user hardware profiles."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkrack.config.load import STACKS_DIR_ENV, load_stack_file, spec_from_config
from sparkrack.stackspec.errors import SpecError

from .support import SHIPPED, STACKS, cluster

pytestmark = pytest.mark.unit


def write_stack(directory: Path, stack: str, raw: dict[str, Any]) -> None:
    document = {"config": {"sparkrack:verifyOnUp": "false", "sparkrack:cluster": raw}}
    (directory / f"Pulumi.{stack}.yaml").write_text(yaml.safe_dump(document))


@pytest.mark.parametrize("stack", SHIPPED)
def test_every_shipped_stack_loads(stack: str) -> None:
    spec = load_stack_file(stack, STACKS)

    assert spec.stack == stack
    assert spec.fabric is not None and spec.fabric.mtu == 9000


def test_the_stacks_dir_comes_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_stack(tmp_path, "mine", cluster("sim-2"))
    monkeypatch.setenv(STACKS_DIR_ENV, str(tmp_path))

    assert load_stack_file("mine").nodes[0].address == "198.18.0.11"


def test_the_stacks_dir_defaults_to_the_checkout_from_anywhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(STACKS_DIR_ENV, raising=False)
    monkeypatch.chdir(tmp_path)

    assert load_stack_file("gb10-2").model.name == "minimax-m2.7-awq"


def test_a_missing_stack_names_the_ones_there(tmp_path: Path) -> None:
    write_stack(tmp_path, "one", cluster("sim-2"))

    with pytest.raises(SpecError) as refused:
        load_stack_file("two", tmp_path)

    assert str(refused.value) == (
        f"stack two: {tmp_path}/Pulumi.two.yaml: no such stack file; stacks there: one"
    )


def test_a_model_file_is_read_relative_to_the_stack_file(tmp_path: Path) -> None:
    (tmp_path / "models").mkdir()
    model = yaml.safe_load(
        (STACKS.parent / "infra/sparkrack/catalog/models/kimi-k3.yaml").read_text()
    )
    model |= {"name": "my-kimi", "hf_repo": "me/my-kimi"}
    (tmp_path / "models" / "my-kimi.yaml").write_text(yaml.safe_dump(model))
    raw = cluster("h200-2")
    raw["model"] = {"file": "models/my-kimi.yaml", "quantization": "mxfp4-custom"}
    write_stack(tmp_path, "h200-mine", raw)

    spec = load_stack_file("h200-mine", tmp_path)

    assert (spec.model.name, spec.model.hf_repo, spec.model.layers) == ("my-kimi", "me/my-kimi", 93)
    assert spec.model.quantization == "mxfp4-custom"


def test_a_missing_model_file_is_a_spec_error(tmp_path: Path) -> None:
    raw = cluster("gb10-2")
    raw["model"] = {"file": "nowhere.yaml"}
    write_stack(tmp_path, "x", raw)

    with pytest.raises(SpecError) as refused:
        load_stack_file("x", tmp_path)

    assert str(refused.value).startswith(
        f"stack x: model.file: cannot read {tmp_path}/nowhere.yaml"
    )


def test_a_user_profile_can_start_from_a_catalogue_one() -> None:
    raw = cluster("gb10-2")
    raw["hardware_profiles"] = {"my-spark": {"base": "gb10", "gpu_memory": "119.6 GiB"}}
    raw["nodes"][1]["hardware"] = "my-spark"

    spec = spec_from_config("gb10-2", raw)

    mine = spec.hardware_profiles["my-spark"]
    assert mine.gpu_memory == round(119.6 * 2**30)
    assert mine.management_nic == "enP7s7"
    assert set(spec.hardware_profiles) == {
        "b200-8",
        "gb10",
        "gb10-sim",
        "gb200-4",
        "gx10",
        "h100-8",
        "h20-8",
        "h200-8",
        "my-spark",
    }


def test_a_node_override_lowers_that_nodes_memory_and_the_fit_sees_it() -> None:
    from sparkrack.plan import make_plan

    raw = cluster("gb10-2")
    raw["nodes"][1]["overrides"] = {"gpu_memory": "119.6 GiB"}

    fit = make_plan(spec_from_config("gb10-2", raw)).fit

    assert fit.tightest_gpu.node == "spark-2"
    assert fit.tightest_gpu.available_bytes == round(0.8 * 119.6 * 2**30)


def test_parameter_counts_read_with_suffixes() -> None:
    spec = spec_from_config("gb10-2", cluster("gb10-2"))

    assert spec.model.total_params == 230e9
    assert spec.model.active_params == 10e9


def test_the_stack_name_is_not_config() -> None:
    raw = cluster("gb10-2")
    raw["stack"] = "other"

    with pytest.raises(SpecError, match=r"^stack gb10-2: stack: set from the stack's name"):
        spec_from_config("gb10-2", raw)


def test_config_that_is_not_a_mapping() -> None:
    with pytest.raises(
        SpecError, match=r"^stack s: sparkrack:cluster: expected a mapping, got list"
    ):
        spec_from_config("s", [])


def test_a_key_given_twice_is_refused_as_pulumi_refuses_it(tmp_path: Path) -> None:
    text = (STACKS / "Pulumi.sim-2.yaml").read_text()
    doubled = text.replace("      port: 22\n", "      port: 22\n      port: 2222\n", 1)
    assert doubled != text
    (tmp_path / "Pulumi.twice.yaml").write_text(doubled)
    with pytest.raises(SpecError) as refused:
        load_stack_file("twice", tmp_path)
    assert "stack twice:" in str(refused.value)
    assert "found the key 'port' twice" in str(refused.value)

"""`sparkrack model pin`: the Hub asked through huggingface_hub (the stand-in hub on loopback), the
commit written into the stack file with its comments kept, and the shipped stacks then deployable
as far as the model goes."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from sparkrack.config.load import load_stack_file
from sparkrack.ops.model_pin import Pin, PinError, pinned_text, resolve
from sparkrack.stackspec import deploy_needs

from .support import STACKS
from .test_weights_download import TOKEN, Hub, serve  # noqa: F401  (serve: the fixture)

pytestmark = pytest.mark.unit

PIN = Pin("org/model", "0123456789abcdef0123456789abcdef01234567", "main")
NOTE = "main on 2026-12-06: sparkrack model pin"
CLUSTER = """\
config:
  sparkrack:verifyOnUp: "true"
  sparkrack:cluster:
    nodes:
      - name: spark-1 # the first
    model: minimax-m2.7-awq # seed 001's
    serving:
      model: not-this-one
"""


def test_a_model_named_becomes_a_mapping_with_its_repository_and_commit() -> None:
    text = pinned_text(CLUSTER, PIN, NOTE)

    assert "    model:  # seed 001's\n      catalog: minimax-m2.7-awq\n" in text
    assert "      hf_repo: org/model\n" in text
    assert f"      revision: {PIN.commit}  # {NOTE}\n" in text
    assert "      model: not-this-one" in text  # serving's own key is not the cluster's model
    assert "- name: spark-1 # the first" in text


def test_a_block_mapping_gets_the_two_keys_once() -> None:
    block = CLUSTER.replace(
        "    model: minimax-m2.7-awq # seed 001's\n",
        "    model:\n      catalog: gemma-3-27b\n      revision: " + "f" * 40 + "\n",
    )

    text = pinned_text(block, PIN, NOTE)

    assert text.count("revision:") == 1 and text.count("hf_repo:") == 1
    assert "      catalog: gemma-3-27b\n      hf_repo: org/model\n      revision: 0123" in text


def test_an_inline_mapping_or_no_model_is_refused() -> None:
    inline = CLUSTER.replace("minimax-m2.7-awq # seed 001's", "{catalog: minimax-m2.7-awq}")
    with pytest.raises(PinError, match="inline mapping"):
        pinned_text(inline, PIN, NOTE)
    with pytest.raises(PinError, match="names no model"):
        pinned_text(CLUSTER.replace("    model: minimax", "    # model: minimax"), PIN, NOTE)


def test_a_repository_id_the_hub_library_refuses_is_one_line() -> None:
    with pytest.raises(PinError, match="'not a repo!' is not a repository id"):
        resolve("not a repo!", "main", endpoint="http://127.0.0.1:9")


def pin_command(stacks: Path, endpoint: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HF_ENDPOINT": endpoint, "HF_TOKEN": TOKEN, "HF_HUB_OFFLINE": "0"}
    command = [sys.executable, "-m", "sparkrack.cli", "model", "pin", "--stacks-dir", str(stacks)]
    return subprocess.run([*command, *args], env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("stack", ["gb10-2", "gb10-16", "h200-2"])
def test_a_shipped_stack_pinned_against_the_hub_needs_nothing_more_to_deploy(
    serve: Callable[..., Hub],  # noqa: F811
    tmp_path: Path,
    stack: str,
) -> None:
    hub = serve()
    stacks = tmp_path / "stacks"
    shutil.copytree(STACKS, stacks)
    before = (stacks / f"Pulumi.{stack}.yaml").read_text()

    done = pin_command(stacks, hub.endpoint, "--stack", stack, "--repo", "org/model")

    assert done.returncode == 0, done.stderr
    spec = load_stack_file(stack, stacks)
    assert (spec.model.hf_repo, spec.model.revision) == ("org/model", hub.commit())
    assert deploy_needs(spec) == []
    after = (stacks / f"Pulumi.{stack}.yaml").read_text()
    comments = [line for line in before.splitlines() if line.lstrip().startswith("#")]
    assert all(line in after.splitlines() for line in comments)  # every comment kept


def test_a_revision_the_hub_lacks_is_one_line_and_the_file_is_untouched(
    serve: Callable[..., Hub],  # noqa: F811
    tmp_path: Path,
) -> None:
    hub = serve()
    stacks = tmp_path / "stacks"
    shutil.copytree(STACKS, stacks)
    before = (stacks / "Pulumi.gb10-2.yaml").read_bytes()

    done = pin_command(
        stacks, hub.endpoint, "--stack", "gb10-2", "--repo", "org/model", "--revision", "v9"
    )

    assert done.returncode == 1
    assert done.stderr == "sparkrack model pin: stack gb10-2: org/model has no revision 'v9'\n"
    assert (stacks / "Pulumi.gb10-2.yaml").read_bytes() == before
    assert sorted(p.name for p in stacks.iterdir()) == sorted(p.name for p in STACKS.iterdir())

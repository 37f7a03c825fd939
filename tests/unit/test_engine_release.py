"""The vLLM release the real stacks pin exists, and takes every flag sparkrack passes to `vllm
serve` (issue 32): held to the release's own source from PyPI (tools/engine_flags.py reads its
sdist, cached under ~/.cache/sparkrack/releases), never to the engine stand-in, which was
written from the same belief as the code. The catalogue's flag list, which `plan` checks a
stack's `extra_args` against, is the same reading."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from sparkrack.catalog import engine_flags
from sparkrack.config.load import refuse_undeployable, spec_from_config
from sparkrack.stackspec.errors import SpecError
from tests.unit.support import STACKS, named_model, plan_of

pytestmark = pytest.mark.unit

REAL_STACKS = ("gb10-2", "gb10-16", "h200-2")
TOOL = Path(__file__).resolve().parents[2] / "tools" / "engine_flags.py"


def tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("engine_flags", TOOL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


FLAGS = tool()


def pinned(stack: str) -> tuple[str, list[str]]:
    """The stack's vLLM release, and the flags its plan passes to `vllm serve`."""
    serving = plan_of(stack, named_model(stack)).serving
    assert serving.engine_build is not None, stack
    return serving.engine_build.vllm, [a.split("=")[0] for a in serving.vllm_args if a[:2] == "--"]


@pytest.mark.parametrize("stack", REAL_STACKS)
def test_the_pinned_vllm_release_exists_and_takes_every_planned_flag(stack: str) -> None:
    version, passed = pinned(stack)
    assert FLAGS.releases().get(version), f"{stack}: vLLM {version} is not a release on PyPI"
    unknown = sorted(set(passed) - FLAGS.release_flags(version))
    assert not unknown, f"{stack}: vLLM {version} has no {unknown}"


def test_the_catalogues_flag_list_is_the_releases() -> None:
    version, _ = pinned("gb10-2")
    assert engine_flags(version) == FLAGS.release_flags(version), (
        f"rewrite it: .venv/bin/python tools/engine_flags.py {version} --write"
    )


def test_the_reading_knows_a_flag_a_release_lacks() -> None:
    version, _ = pinned("gb10-2")
    known = FLAGS.release_flags(version)
    assert {"--max-model-len", "--shutdown-timeout", "--host", "--port"} <= known
    assert "--token-rate" not in known  # the stand-in's own: never on a real stack
    # The drain's flag came with vllm-project/vllm#36666 (merged 2026-03-10): not in 0.17.1.
    older = FLAGS.release_flags("0.17.1")
    assert "--max-model-len" in older and "--shutdown-timeout" not in older


def test_a_flag_the_pinned_release_lacks_is_refused_naming_it() -> None:
    raw = named_model("gb10-2")
    raw["serving"]["extra_args"] = [
        "--enable-prefix-caching",
        "--no-enable-log-requests",  # a boolean's negation
        "--not-a-flag=1",
        "--no-such-option",
    ]
    message = undeployable(raw)
    assert "serving.extra_args: --not-a-flag: vLLM 0.27.1 has no such flag" in message
    assert "serving.extra_args: --no-such-option: vLLM 0.27.1 has no such flag" in message
    assert "prefix-caching" not in message and "log-requests" not in message


def undeployable(raw: dict[str, object]) -> str:
    with pytest.raises(SpecError) as refused:
        refuse_undeployable(spec_from_config("gb10-2", raw, base_dir=STACKS))
    return str(refused.value)

"""The vLLM release the real stacks pin exists, and takes every flag sparkrack passes to `vllm
serve` (issue 32): held to the release's own source from PyPI, its sdist (cached under
~/.cache/sparkrack/releases), never to the engine stand-in, which was written from the same
belief as the code. A flag is a field of vLLM's EngineArgs or of its OpenAI server's arguments
(their dataclass fields become `--kebab-case` flags), read from the source with `ast`."""

from __future__ import annotations

import ast
import json
import tarfile
import urllib.parse
import urllib.request
from functools import cache
from pathlib import Path

import pytest

from sparkrack.cache import cache_root
from tests.unit.support import named_model, plan_of

pytestmark = pytest.mark.unit

PYPI = "https://pypi.org/pypi/vllm/json"
REAL_STACKS = ("gb10-2", "gb10-16", "h200-2")
# Where `vllm serve` takes its flags from: the engine's arguments, the OpenAI server's.
ARGUMENT_FILES = {
    "vllm/engine/arg_utils.py": ("EngineArgs", "AsyncEngineArgs"),
    "vllm/entrypoints/openai/cli_args.py": ("BaseFrontendArgs", "FrontendArgs"),
}
TIMEOUT_S = 120


@cache
def releases() -> dict[str, list[dict[str, object]]]:
    with urllib.request.urlopen(PYPI, timeout=TIMEOUT_S) as answer:
        return dict(json.load(answer)["releases"])


def sdist(version: str) -> Path:
    """The release's source archive, downloaded once."""
    path = cache_root() / "releases" / f"vllm-{version}.tar.gz"
    if not path.is_file():
        (url,) = [f["url"] for f in releases()[version] if f["packagetype"] == "sdist"]
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".part")
        with urllib.request.urlopen(urllib.parse.urljoin(PYPI, str(url)), timeout=TIMEOUT_S) as got:
            partial.write_bytes(got.read())
        partial.replace(path)
    return path


@cache
def flags(version: str) -> frozenset[str]:
    """Every `--flag` the release's argument dataclasses define."""
    found: set[str] = set()
    with tarfile.open(sdist(version)) as archive:
        for name, classes in ARGUMENT_FILES.items():
            member = archive.extractfile(f"vllm-{version}/{name}")
            assert member is not None, name
            tree = ast.parse(member.read())
            for node in ast.walk(tree):
                if isinstance(node, ast.ClassDef) and node.name in classes:
                    found |= {
                        f"--{item.target.id.replace('_', '-')}"
                        for item in node.body
                        if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)
                    }
    return frozenset(found)


def pinned(stack: str) -> tuple[str, list[str]]:
    """The stack's vLLM release, and the flags its plan passes to `vllm serve`."""
    serving = plan_of(stack, named_model(stack)).serving
    assert serving.engine_build is not None, stack
    return serving.engine_build.vllm, [a.split("=")[0] for a in serving.vllm_args if a[:2] == "--"]


@pytest.mark.parametrize("stack", REAL_STACKS)
def test_the_pinned_vllm_release_exists_and_takes_every_planned_flag(stack: str) -> None:
    version, passed = pinned(stack)
    assert releases().get(version), f"{stack}: vLLM {version} is not a release on PyPI"
    unknown = sorted(set(passed) - flags(version))
    assert not unknown, f"{stack}: vLLM {version} has no {unknown}"


def test_the_check_knows_a_flag_a_release_lacks() -> None:
    version, _ = pinned("gb10-2")
    known = flags(version)
    assert {"--max-model-len", "--shutdown-timeout", "--host", "--port"} <= known
    assert "--token-rate" not in known  # the stand-in's own: never on a real stack
    # The drain's flag came with vllm-project/vllm#36666 (merged 2026-03-10): not in 0.17.1.
    assert "--max-model-len" in flags("0.17.1") and "--shutdown-timeout" not in flags("0.17.1")

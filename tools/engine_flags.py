#!/usr/bin/env python3
"""The `vllm serve` flags of a vLLM release, read from its source package on PyPI.

    .venv/bin/python tools/engine_flags.py 0.27.1           # print them
    .venv/bin/python tools/engine_flags.py 0.27.1 --write   # ... into catalog/engines/

A flag is a field of vLLM's EngineArgs or of its OpenAI server's arguments (their dataclass
fields become `--kebab-case` flags), read with `ast` from the sdist: no torch, nothing built.
The sdist is downloaded once into ~/.cache/sparkrack/releases. tests/unit/test_engine_release.py
holds the catalogue's list, and every flag a real stack passes, to the same reading.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
import tarfile
import urllib.parse
import urllib.request
from functools import cache
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "infra"))

from sparkrack.config.cache import cache_root  # noqa: E402
from sparkrack.catalog import data_path  # noqa: E402

PYPI = "https://pypi.org/pypi/vllm/json"
# Where `vllm serve` takes its flags from: the engine's arguments, the OpenAI server's.
ARGUMENT_FILES = {
    "vllm/engine/arg_utils.py": ("EngineArgs", "AsyncEngineArgs"),
    "vllm/entrypoints/openai/cli_args.py": ("BaseFrontendArgs", "FrontendArgs"),
}
TIMEOUT_S = 120


@cache
def releases() -> dict[str, list[dict[str, object]]]:
    """PyPI's releases of vLLM: version -> its files."""
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


def class_flags(source: bytes, classes: tuple[str, ...]) -> set[str]:
    """The `--flag` of every annotated field of the named classes."""
    return {
        f"--{item.target.id.replace('_', '-')}"
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.ClassDef) and node.name in classes
        for item in node.body
        if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)
        if not item.target.id.startswith("_")  # private: no flag
    }


@cache
def release_flags(version: str) -> frozenset[str]:
    """Every `--flag` the release's argument dataclasses define."""
    found: set[str] = set()
    with tarfile.open(sdist(version)) as archive:
        for name, classes in ARGUMENT_FILES.items():
            member = archive.extractfile(f"vllm-{version}/{name}")
            if member is None:
                raise FileNotFoundError(f"vllm {version}: no {name} in its sdist")
            found |= class_flags(member.read(), classes)
    return frozenset(found)


def catalogue_text(version: str) -> str:
    lines = [
        f"# `vllm serve` flags of vLLM {version}, read by tools/engine_flags.py from its sdist on",
        "# PyPI (EngineArgs and the OpenAI server's argument dataclasses). Do not edit by hand.",
        f"release: '{version}'",
        "flags:",
        *(f"  - '{flag}'" for flag in sorted(release_flags(version))),
    ]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("version", help="a vLLM release on PyPI, e.g. 0.27.1")
    parser.add_argument("--write", action="store_true", help="into catalog/engines/")
    args = parser.parse_args()
    if args.version not in releases():
        print(f"vLLM {args.version} is not a release on PyPI", file=sys.stderr)
        return 1
    text = catalogue_text(args.version)
    if args.write:
        Path(data_path(f"engines/vllm-{args.version}.yaml")).write_text(text)
    else:
        print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""docs/verification.md holds every verification check to what `preview` reads and `up`
repairs: the table cannot go stale while this passes."""

from __future__ import annotations

import ast
import importlib
import pkgutil
import re
from pathlib import Path

import pytest

from sparkrack import resources
from sparkrack.resources.base import NodeProvider
from sparkrack.verify import checks

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
TABLE = REPO / "docs" / "verification.md"
CELL = re.compile(r"`([^`]+)`")


def rows() -> dict[str, list[str]]:
    """check -> its five cells, from the table's lines."""
    found: dict[str, list[str]] = {}
    for line in TABLE.read_text().splitlines():
        if line.startswith("| `test_"):
            cells = [cell.strip() for cell in line.strip("|").split(" | ")]
            check = CELL.findall(cells[0])[0]
            assert check not in found, f"{check} is in the table twice"
            found[check] = cells
    return found


def functions(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}


def check_names() -> set[str]:
    folder = Path(checks.__file__).parent
    return {
        name
        for path in folder.glob("test_*.py")
        for name in functions(path)
        if name.startswith("test_")
    }


def import_all_resources() -> None:
    for module in pkgutil.iter_modules(resources.__path__):
        importlib.import_module(f"{resources.__name__}.{module.name}")


def provider_properties() -> dict[str, set[str]]:
    """Resource name -> what its provider reads (STATE) or replaces on (REPLACE)."""
    found: dict[str, set[str]] = {}
    for provider in all_subclasses(NodeProvider):
        name = provider.__name__.removesuffix("Provider")
        props = set(getattr(provider, "STATE", ())) | set(getattr(provider, "REPLACE", ()))
        found.setdefault(name, set()).update(props)
    found["Image"] = found.get("ShippedImage", set()) | found.get("ControlImage", set())
    return found


def all_subclasses(cls: type) -> list[type]:
    found: list[type] = []
    direct: type
    for direct in cls.__subclasses__():
        found += [direct, *all_subclasses(direct)]
    return found


def test_every_check_is_in_the_table_once() -> None:
    assert set(rows()) == check_names()


def test_every_property_named_is_one_a_provider_reads() -> None:
    import_all_resources()
    known = provider_properties()
    for check, cells in rows().items():
        named = [ref for ref in CELL.findall(cells[2]) if "." in ref]
        if cells[2] == "—":
            assert cells[3].startswith("not by `up`"), f"{check}: no reader, and no reason"
            continue
        assert named, f"{check}: name the Resource.property that preview shows"
        for ref in named:
            resource, _, prop = ref.partition(".")
            assert prop in known.get(resource, set()), f"{check}: {ref} is read by no provider"


def test_every_fault_test_exists() -> None:
    for check, cells in rows().items():
        tests = CELL.findall(cells[4])
        assert tests, f"{check}: name a test in which it fails"
        for ref in tests:
            path, _, name = ref.partition("::")
            assert name in functions(REPO / path), f"{check}: no {ref}"


def runs_up(ref: str) -> bool:
    """Whether the e2e test `path::name` runs `up` (itself, or by a helper named for it)."""
    path, _, name = ref.partition("::")
    source = (REPO / path).read_text()
    [function] = [n for n in ast.parse(source).body if getattr(n, "name", "") == name]
    body = ast.get_source_segment(source, function) or ""
    return '"up"' in body or "up_repairs" in body


def test_every_check_up_repairs_has_an_e2e_test_that_breaks_it_and_runs_up() -> None:
    """A row whose repair is `up`'s names an end-to-end test that injects the fault on a deployed
    rack and runs `up`; a row `up` cannot repair says why instead."""
    proven = {
        check
        for check, cells in rows().items()
        if any(ref.startswith("tests/e2e/") and runs_up(ref) for ref in CELL.findall(cells[4]))
    }
    repairable = {c for c, cells in rows().items() if not cells[3].startswith("not by `up`")}
    assert not repairable - proven, f"no e2e test injects: {sorted(repairable - proven)}"

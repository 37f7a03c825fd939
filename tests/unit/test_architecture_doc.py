"""docs/architecture.md and .importlinter are one list: the page's rules are the contracts' names
in their order, and its rooms are the packages of infra/sparkrack, each held by the contracts."""

from __future__ import annotations

import configparser
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "infra" / "sparkrack"
DOC = (REPO / "docs" / "architecture.md").read_text()


def contracts() -> list[configparser.SectionProxy]:
    config = configparser.ConfigParser(interpolation=None)
    config.read(REPO / ".importlinter")
    return [config[name] for name in config.sections() if name.startswith("importlinter:contract:")]


def section(title: str) -> str:
    start = DOC.index(f"## {title}")
    end = DOC.find("\n## ", start + 1)
    return DOC[start : end if end != -1 else None]


def listed(contract: configparser.SectionProxy, key: str) -> set[str]:
    return {line.strip() for line in contract[key].splitlines() if line.strip()}


def test_the_rules_are_the_contracts_names_in_their_order() -> None:
    rules = re.findall(r"^\d+\. \*\*(.+?)\*\*", section("Rules the contracts enforce"), re.M)
    assert rules == [contract["name"] for contract in contracts()]


def test_every_package_is_a_room_of_the_page() -> None:
    packages = {p.parent.name for p in PACKAGE.glob("*/__init__.py")}
    modules = {p.name for p in PACKAGE.glob("*.py")} - {"__init__.py"}
    rooms = section("Rooms")
    assert packages == set(re.findall(r"`sparkrack/(\w+)/`", rooms))
    assert modules == set(re.findall(r"`sparkrack/(\w+\.py)`", rooms))


def test_every_room_but_the_cli_is_held_below_it() -> None:
    """The contract that keeps the CLI on top names every other room: a new package is either in
    it, or this fails and says which."""
    [on_top] = [c for c in contracts() if c["name"].startswith("The CLI is an entry point")]
    rooms = {f"sparkrack.{p.parent.name}" for p in PACKAGE.glob("*/__init__.py")}
    rooms |= {f"sparkrack.{p.stem}" for p in PACKAGE.glob("*.py") if p.name != "__init__.py"}
    assert listed(on_top, "source_modules") == (rooms - {"sparkrack.cli"}) | {"roles"}

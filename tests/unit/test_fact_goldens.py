"""Every fact's golden cases, one YAML file each in tests/unit/golden/facts (as pyinfra keeps its
facts' tests): the exact command the builder makes, an output captured on a node or written to its
shape, and the value the parser reads from it. golden/README.md says how to add one."""

from __future__ import annotations

import builtins
import dataclasses
import importlib
import inspect
import pkgutil
import typing
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import pytest

import sparkrack.facts
from sparkrack.config.yamlload import load_yaml
from sparkrack.facts import Fact

pytestmark = pytest.mark.unit

CASES = Path(__file__).parent / "golden" / "facts"
CASE_FILES = sorted(CASES.glob("*.yaml"))
SOURCES = ("sim-debian13", "host-debian12", "hand-written", "dgx-os-7-gb10")
REQUIRED = {"fact", "source", "command", "output"}
OPTIONAL = {"args", "kwargs", "as_user", "note", "value", "raises"}
PACKAGE = "sparkrack.facts."
# What the simulator makes up (sparkrack.sim: the RDMA sysfs tree, the GPU's device nodes and
# driver module, nvidia-smi, nvidia-ctk and the CDI spec it writes): a sim capture of these would
# only show the parser reads the project's own fake, so such cases are written to the real
# tool's shape, with their public source in `note`, and say `hand-written`.
FAKED_ON_SIM = (
    "/sys/class/infiniband",
    "/dev/infiniband",
    "/dev/nvidia",
    "/sys/module/nvidia",
    "nvidia-smi",
    "nvidia-ctk",
    "/etc/cdi",
    "/var/run/cdi",
)


def plain(value: object) -> object:
    """A parsed value as YAML writes it: dataclasses as mappings, tuples as lists, sets sorted."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return plain(dataclasses.asdict(value))
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [plain(item) for item in value]
    if isinstance(value, set | frozenset):
        return sorted(plain(item) for item in value)  # type: ignore[type-var]
    return value


def typed(value: object) -> object:
    """`value` with each leaf's type beside it: `==` alone takes True for 1 and 1.0 for 1."""
    if isinstance(value, dict):
        return {key: typed(item) for key, item in value.items()}
    if isinstance(value, list):
        return [typed(item) for item in value]
    return (type(value).__name__, value)


@cache
def builders() -> dict[str, Callable[..., Fact[Any]]]:
    """Every public function of the sparkrack.facts modules that returns a Fact, by dotted name."""
    found: dict[str, Callable[..., Fact[Any]]] = {}
    for info in pkgutil.iter_modules(sparkrack.facts.__path__, PACKAGE):
        module = importlib.import_module(info.name)
        for name, function in inspect.getmembers(module, inspect.isfunction):
            if name.startswith("_") or function.__module__ != module.__name__:
                continue
            if typing.get_origin(typing.get_type_hints(function).get("return")) is Fact:
                found[f"{module.__name__}.{name}"] = function
    return found


def load_case(path: Path) -> dict[str, Any]:
    case = load_yaml(path.read_text())
    assert isinstance(case, dict), f"{path.name}: a case is a mapping"
    assert not REQUIRED - case.keys(), f"{path.name}: missing {sorted(REQUIRED - case.keys())}"
    unknown = case.keys() - REQUIRED - OPTIONAL
    assert not unknown, f"{path.name}: unknown keys {sorted(unknown)}"
    assert ("value" in case) != ("raises" in case), f"{path.name}: give value or raises, not both"
    assert isinstance(case["output"], str), f"{path.name}: output is text (quote it)"
    return case


def fact_of(case: dict[str, Any]) -> Fact[Any]:
    module, _, name = str(case["fact"]).rpartition(".")
    builder = getattr(importlib.import_module(module), name)
    fact: Fact[Any] = builder(*case.get("args", []), **case.get("kwargs", {}))
    return fact.as_user(case["as_user"]) if case.get("as_user") else fact


def exception(name: str) -> type[BaseException]:
    module, _, attribute = name.rpartition(".")
    found = getattr(importlib.import_module(module) if module else builtins, attribute)
    assert isinstance(found, type) and issubclass(found, BaseException), f"{name}: no exception"
    return found


@pytest.mark.parametrize("path", CASE_FILES, ids=[path.stem for path in CASE_FILES])
def test_the_fact_runs_the_command_and_reads_the_value(path: Path) -> None:
    case = load_case(path)
    assert case["source"] in SOURCES, f"source is one of {SOURCES}"
    fact = fact_of(case)
    assert fact.command == case["command"]
    if "raises" in case:
        with pytest.raises(exception(case["raises"])):
            fact.parse(case["output"])
        return
    found = plain(fact.parse(case["output"]))
    assert found == case["value"]
    assert typed(found) == typed(case["value"])


def test_no_sim_capture_reads_what_the_simulator_fakes() -> None:
    captured = [(path, load_case(path)) for path in CASE_FILES]
    fakes = [
        f"{path.name}: reads {faked}"
        for path, case in captured
        if case["source"] == "sim-debian13"
        for faked in FAKED_ON_SIM
        if faked in case["command"]
    ]
    assert not fakes, "sim captures of the simulator's fakes:\n" + "\n".join(fakes)


def test_every_fact_builder_has_a_case() -> None:
    covered = {load_yaml(path.read_text()).get("fact") for path in CASE_FILES}
    missing = sorted(builders().keys() - covered)
    assert not missing, f"fact builders without a case in {CASES}: " + ", ".join(missing)


def test_every_case_names_a_builder_and_is_named_after_it() -> None:
    wrong = [f"{path.name}: not a .yaml case" for path in CASES.iterdir() if path.suffix != ".yaml"]
    for path in CASE_FILES:
        dotted = str(load_yaml(path.read_text()).get("fact"))
        prefix = dotted.removeprefix(PACKAGE) + "."
        if dotted not in builders():
            wrong.append(f"{path.name}: {dotted} is not a fact builder in {PACKAGE}*")
        elif not path.stem.startswith(prefix) or path.stem == prefix:
            wrong.append(f"{path.name}: name it {prefix}<case>.yaml")
    assert not wrong, "\n".join(wrong)

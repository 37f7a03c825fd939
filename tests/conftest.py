"""Every test carries its tier's marker, from the folder it lives in: `pytest -m unit` collects
all of tests/unit, and a new file cannot fall out of its tier by forgetting a `pytestmark`.

End-to-end tests also carry the rack they share as their xdist group, so `--dist loadgroup`
keeps a rack's tests on one worker (a package's racks: full2, sim16; else the module's), and the
racks run slowest first so two workers finish together."""

from __future__ import annotations

from pathlib import Path

import pytest

TIERS = ("unit", "program", "e2e")
HERE = Path(__file__).resolve().parent

# The e2e racks measured slowest first (seconds on a 2-core CI machine, one worker); a rack not
# named here runs after these, in collection order.
E2E_SLOWEST_FIRST = (
    "sim16",
    "test_roles_deploy",
    "full2",
    "test_weights_sim",
    "test_resources_drift",
    "test_ops_sim",
    "test_sim_cluster",
    "test_verify_faults",
    "test_monitoring_images",
)


def rack_of(parts: tuple[str, ...]) -> str:
    """tests/e2e/<package>/... -> the package; tests/e2e/<module>.py -> the module."""
    return parts[1] if len(parts) > 2 else Path(parts[1]).stem


def slowness_rank(item: pytest.Item) -> int:
    parts = item.path.resolve().relative_to(HERE).parts
    if parts[0] != "e2e":
        return -1
    rack = rack_of(parts)
    return E2E_SLOWEST_FIRST.index(rack) if rack in E2E_SLOWEST_FIRST else len(E2E_SLOWEST_FIRST)


# tryfirst: xdist reads the group marker in its own hook of the same name.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        parts = item.path.resolve().relative_to(HERE).parts
        if parts and parts[0] in TIERS:
            item.add_marker(parts[0])
        if parts and parts[0] == "e2e" and len(parts) > 1:
            item.add_marker(pytest.mark.xdist_group(rack_of(parts)))
    items.sort(key=slowness_rank)  # stable: a rack's own order is kept

"""Every test carries its tier's marker, from the folder it lives in: `pytest -m unit` collects
all of tests/unit, and a new file cannot fall out of its tier by forgetting a `pytestmark`.

Under pytest-xdist with `--dist loadscope` the end-to-end tests are scheduled by the rack they
share (a package's: full2, sim16; else the module's), so one rack's tests stay on one worker, and
the racks run slowest first so two workers finish together. (xdist's own `loadgroup` marks a
group by rewriting `item._nodeid`, which pytest 9.2 no longer reads: it silently split sim16.)
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

TIERS = ("unit", "program", "e2e")
HERE = Path(__file__).resolve().parent

# The e2e racks, slowest first (measured on a 2-core CI machine: stop 40's CI ran full2 for
# 24 min, sim16 for 15, test_roles_deploy for 11); a rack not named here runs after these, in
# collection order.
E2E_SLOWEST_FIRST = (
    "full2",
    "sim16",
    "test_roles_deploy",
    "test_image_change",
    "test_grow_shrink",
    "test_weights_sim",
    "test_resources_drift",
    "test_ops_sim",
    "test_sim_cluster",
    "test_verify_faults",
    "test_monitoring_images",
)


def rack_of(path: str) -> str:
    """tests/e2e/<package>/<module> -> the package; tests/e2e/<module>.py -> the module; any
    other test file is its own."""
    parts = path.split("::", 1)[0].split("/")
    if parts[:2] != ["tests", "e2e"] or len(parts) < 3:
        return parts[-1]
    return parts[2] if len(parts) > 3 else Path(parts[2]).stem


def slowness_rank(item: pytest.Item) -> int:
    rack = rack_of(item.nodeid)
    return E2E_SLOWEST_FIRST.index(rack) if rack in E2E_SLOWEST_FIRST else len(E2E_SLOWEST_FIRST)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        parts = item.path.resolve().relative_to(HERE).parts
        if parts and parts[0] in TIERS:
            item.add_marker(parts[0])
    items.sort(key=slowness_rank)  # stable: a rack's own order is kept


@pytest.hookimpl(optionalhook=True)  # xdist's hook: absent under `-p no:xdist`
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`--dist loadscope`, with the rack as the scope."""
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling  # type: ignore[import-untyped]

    class RackScheduling(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return rack_of(nodeid)

    return RackScheduling(config, log)


# Each e2e rack's time (setup, calls, teardown), summed from the reports: the list to order
# E2E_SLOWEST_FIRST by, and to see how two workers' shares compare.
RACK_SECONDS: defaultdict[str, float] = defaultdict(float)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.nodeid.startswith("tests/e2e/"):
        RACK_SECONDS[rack_of(report.nodeid)] += report.duration


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if RACK_SECONDS:
        racks = sorted(RACK_SECONDS.items(), key=lambda item: -item[1])
        shown = ", ".join(f"{rack} {seconds:.0f} s" for rack, seconds in racks)
        terminalreporter.write_line(f"e2e racks, slowest first: {shown}")

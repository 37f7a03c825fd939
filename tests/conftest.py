"""Every test carries its tier's marker, from the folder it lives in: `pytest -m unit` collects
all of tests/unit, and a new file cannot fall out of its tier by forgetting a `pytestmark`."""

from __future__ import annotations

from pathlib import Path

import pytest

TIERS = ("unit", "program", "e2e")
HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        parts = item.path.resolve().relative_to(HERE).parts
        if parts and parts[0] in TIERS:
            item.add_marker(parts[0])

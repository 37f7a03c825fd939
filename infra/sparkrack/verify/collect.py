"""A pytest plugin for `sparkrack verify`: every check's outcome, as JSON, from the controller.

Loaded with `-p sparkrack.verify.collect`; under pytest-xdist the controller sees every worker's
reports, so only it writes. The path is $SPARKRACK_VERIFY_RESULTS.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

RESULTS_ENV = "SPARKRACK_VERIFY_RESULTS"
_results: list[dict[str, Any]] = []  # one pytest session per process


@pytest.hookimpl(trylast=True)
def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call" or report.outcome != "passed":
        properties = dict(report.user_properties)
        _results.append(
            {
                "id": report.nodeid.split("::", 1)[-1],
                "node": properties.get("node", "cluster"),
                "check": properties.get("check", report.nodeid.split("::")[-1].split("[")[0]),
                "category": properties.get("category", ""),
                "outcome": report.outcome,
                "detail": detail(report),
            }
        )


def pytest_sessionfinish(session: pytest.Session) -> None:
    path = os.environ.get(RESULTS_ENV)
    if path and not hasattr(session.config, "workerinput"):
        Path(path).write_text(json.dumps(_results, indent=1))


def detail(report: pytest.TestReport) -> str:
    """One line: the assertion's message, or the skip's reason."""
    if report.passed:
        return ""
    longrepr = report.longrepr
    if isinstance(longrepr, tuple):  # a skip: (path, line, "Skipped: reason")
        return str(longrepr[2]).removeprefix("Skipped: ")
    crash = getattr(longrepr, "reprcrash", None)
    text = crash.message if crash is not None else str(longrepr)
    first = text.strip().splitlines()[0] if text.strip() else report.outcome
    return first.removeprefix("AssertionError: ")

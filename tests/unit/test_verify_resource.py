"""The verification resource: runs `sparkrack verify` only when the Plan's digest changed, and a
failing check fails it with the node and check named. `sparkrack verify` itself is faked."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest

from sparkrack.resources.verification import VerificationError, VerificationProvider

pytestmark = pytest.mark.unit

PROPS = {"stack": "sim-2", "digest": "d1", "stacks_dir": None}
PASSED = {"id": "test_link_mtu[spark-1-enp1s0f0np0]", "node": "spark-1", "outcome": "passed"}
FAILED = {
    "id": "test_link_mtu[spark-2-enp1s0f0np0]",
    "node": "spark-2",
    "outcome": "failed",
    "detail": "enp1s0f0np0 MTU 1500, want 9000",
}


def fake_verify(
    monkeypatch: pytest.MonkeyPatch, results: list[dict[str, Any]], status: int
) -> list[list[str]]:
    calls: list[list[str]] = []

    def run(command: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        calls.append(command)
        report = json.dumps({"results": results})
        return subprocess.CompletedProcess(command, status, report, "")

    monkeypatch.setattr(subprocess, "run", run)
    return calls


def test_create_runs_verify_and_records_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = fake_verify(monkeypatch, [PASSED], 0)
    created = VerificationProvider().create(dict(PROPS))
    assert calls[0][-4:] == ["verify", "--stack", "sim-2", "--json"]
    assert created.outs is not None
    assert (created.outs["passed"], created.outs["failed"]) == (1, 0)


def test_a_failing_check_fails_the_resource_naming_node_and_check(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake_verify(monkeypatch, [PASSED, FAILED], 1)
    with pytest.raises(VerificationError) as error:
        VerificationProvider().create(dict(PROPS))
    assert "spark-2 test_link_mtu[spark-2-enp1s0f0np0]: enp1s0f0np0 MTU 1500" in str(error.value)


def test_a_broken_run_fails_the_resource(monkeypatch: pytest.MonkeyPatch) -> None:
    def run(command: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(command, 2, "", "sparkrack: stack sim-9 not found")

    monkeypatch.setattr(subprocess, "run", run)
    with pytest.raises(VerificationError, match="exited 2: sparkrack: stack sim-9 not found"):
        VerificationProvider().update("verify:sim-2", dict(PROPS), dict(PROPS))


def test_diff_asks_for_an_update_only_when_the_digest_changed() -> None:
    provider = VerificationProvider()
    olds = {**PROPS, "passed": 70, "failed": 0, "skipped": 29}
    assert provider.diff("verify:sim-2", olds, dict(PROPS)).changes is False
    assert provider.diff("verify:sim-2", olds, {**PROPS, "digest": "d2"}).changes is True


def test_read_does_not_rerun(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = fake_verify(monkeypatch, [FAILED], 1)
    stored = {**PROPS, "passed": 70, "failed": 0, "skipped": 29}
    assert VerificationProvider().read("verify:sim-2", stored).outs == stored
    assert calls == []

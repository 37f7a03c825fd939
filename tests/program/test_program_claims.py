"""The program and the other stacks of its backend (issue 34, item 6): a node another stack
claims is refused before any resource is registered; `takeover` takes it; every run records its
own claims; what could not be read is said and the run goes on."""

from __future__ import annotations

from pathlib import Path

import pulumi
import pytest

from sparkrack.ops import claims as backend_claims
from sparkrack.plan.claims import Claims, NodeClaim, plan_claims
from tests.unit.support import plan_of

from .harness import RecordingMocks, run_program, stack_cluster

pytestmark = pytest.mark.program

LAB2 = Claims(nodes=(NodeClaim(name="box-a", address="198.18.0.12"),))


def backend_holding(
    monkeypatch: pytest.MonkeyPatch, found: backend_claims.OtherClaims
) -> list[tuple[str, Path]]:
    """The backend read answers `found`; returns what the program asked it (stack, project)."""
    asked: list[tuple[str, Path]] = []

    def read(stack: str, project_dir: Path) -> backend_claims.OtherClaims:
        asked.append((stack, project_dir))
        return found

    monkeypatch.setattr(backend_claims, "other_claims", read)
    return asked


def test_a_node_another_stack_claims_stops_the_program_before_any_resource(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked = backend_holding(monkeypatch, backend_claims.OtherClaims(claims={"lab-2": LAB2}))
    mocks = RecordingMocks()
    with pytest.raises(pulumi.RunError) as refused:
        run_program("sim-2", stack_cluster("sim-2"), mocks)
    assert str(refused.value) == (
        "stack sim-2: nodes[1] (spark-2).address: 198.18.0.12 is claimed by stack lab-2 (its"
        " box-a): an `up` would reconfigure that rack; add lab-2 to `takeover` to take the node"
        " over"
    )
    assert mocks.resources == []
    assert [stack for stack, _project in asked] == ["sim-2"]  # once, leaving itself out


def test_takeover_deploys_and_every_run_records_its_claims(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    backend_holding(monkeypatch, backend_claims.OtherClaims(claims={"lab-2": LAB2}))
    cluster = stack_cluster("sim-2") | {"takeover": ["lab-2"]}
    run = run_program("sim-2", cluster)
    assert run.mocks.resources
    expected = plan_claims(plan_of("sim-2", cluster)).model_dump(mode="json")
    assert run.outputs[backend_claims.CLAIMS_OUTPUT] == expected
    assert [node["address"] for node in expected["nodes"]] == ["198.18.0.11", "198.18.0.12"]


def test_what_the_backend_could_not_tell_is_warned_and_the_run_goes_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    unread = "stack old records no claims (its last `up` predates them, or failed): ..."
    backend_holding(monkeypatch, backend_claims.OtherClaims(unread=[unread]))
    warned: list[str] = []
    monkeypatch.setattr(pulumi.log, "warn", lambda message, *args, **kwargs: warned.append(message))
    run = run_program("sim-2", stack_cluster("sim-2"))
    assert warned == [unread]
    assert run.mocks.resources

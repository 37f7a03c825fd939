"""MemlockLimit: one value, its spelling in each dialect that sets or shows it, and the one rule
that judges what a node reports against it."""

from __future__ import annotations

import pytest

from sparkrack.config.load import load_stack_file
from sparkrack.plan import Plan, make_plan
from sparkrack.text.limits import MemlockLimit

pytestmark = pytest.mark.unit

EIGHT_MIB = 8 * 2**20


@pytest.mark.parametrize(
    ("limit", "systemd", "podman", "proc"),
    [
        (MemlockLimit(), "infinity", "-1:-1", "unlimited"),
        (MemlockLimit(EIGHT_MIB), "8388608", "8388608:8388608", "8388608"),
    ],
)
def test_each_dialect_spells_it_its_own_way(
    limit: MemlockLimit, systemd: str, podman: str, proc: str
) -> None:
    assert (limit.systemd(), limit.podman(), limit.proc()) == (systemd, podman, proc)


@pytest.mark.parametrize("text", ["infinity", "unlimited", "-1", " unlimited\n"])
def test_every_dialect_spelling_of_no_limit_reads_as_unlimited(text: str) -> None:
    assert MemlockLimit.parse(text) == MemlockLimit(None)


def test_each_rendering_reads_back_as_the_same_limit() -> None:
    for limit in (MemlockLimit(), MemlockLimit(EIGHT_MIB), MemlockLimit(0)):
        for text in (limit.systemd(), limit.proc(), limit.podman().partition(":")[0]):
            assert MemlockLimit.parse(text) == limit, text


@pytest.mark.parametrize("text", ["", "lots", "8 MiB", "-2", "1.5", "²"])
def test_what_no_dialect_prints_is_refused_naming_it(text: str) -> None:
    with pytest.raises(ValueError, match=f"{text!r}: want infinity, unlimited or bytes"):
        MemlockLimit.parse(text)


@pytest.mark.parametrize(
    ("planned", "read", "granted"),
    [
        (None, "unlimited", True),
        (None, "infinity", True),
        (None, "-1", True),
        (None, "8388608", False),  # a GB10 wants unlimited: no byte count is enough
        (None, str(2**63), False),
        (EIGHT_MIB, "8388608", True),
        (EIGHT_MIB, "16777216", True),  # more never hurts NCCL
        (EIGHT_MIB, "unlimited", True),
        (EIGHT_MIB, "infinity", True),
        (EIGHT_MIB, "8388607", False),
        (EIGHT_MIB, "65536", False),
        (EIGHT_MIB, "", False),  # nothing read (no process, no user yet)
        (EIGHT_MIB, "lots", False),
    ],
)
def test_a_read_limit_grants_the_planned_one_when_unlimited_or_at_least_as_large(
    planned: int | None, read: str, granted: bool
) -> None:
    assert MemlockLimit(planned).granted_by(read) is granted


@pytest.mark.parametrize(("stack", "bytes_"), [("sim-2", EIGHT_MIB), ("gb10-2", None)])
def test_the_plan_carries_the_hardware_profiles_limit_through_its_json(
    stack: str, bytes_: int | None
) -> None:
    """The verification reads the Plan back from JSON: the limit must come back the same."""
    plan = make_plan(load_stack_file(stack))
    again = Plan.model_validate_json(plan.model_dump_json())
    assert {node.memlock_limit for node in again.nodes} == {MemlockLimit(bytes_)}

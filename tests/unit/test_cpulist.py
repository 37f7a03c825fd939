"""CpuList: one set of CPUs, its spelling in each dialect that sets or shows it, and the one rule
that judges what a node reports against it."""

from __future__ import annotations

import json

import pytest

from sparkrack.config.load import load_stack_file
from sparkrack.plan import Plan, make_plan
from sparkrack.resources import podman
from sparkrack.text.cpus import NO_CPUS, CpuList

from .support import SHIPPED

pytestmark = pytest.mark.unit

GB10_HOUSEKEEPING = CpuList.of([*range(5), *range(10, 15)])  # the A725 cores


@pytest.mark.parametrize("text", ["0-4,10-14", "0,1,2,3,4,10-14", "10-14,0-4", " 0-4, 10-14\n"])
def test_every_spelling_of_a_set_reads_as_that_set(text: str) -> None:
    assert CpuList.parse(text) == GB10_HOUSEKEEPING


def test_each_dialect_spells_it_its_own_way() -> None:
    cpus = GB10_HOUSEKEEPING
    assert (cpus.kernel(), cpus.systemd(), cpus.mask()) == ("0-4,10-14", "0-4 10-14", "7c1f")
    assert (str(cpus), str(CpuList.of([3])), NO_CPUS.kernel(), NO_CPUS.systemd()) == (
        "0-4,10-14",
        "3",
        "",
        "",
    )


def test_masks_above_32_cpus_are_grouped_like_the_kernel() -> None:
    assert CpuList.of([0, 1, 2, 3, 56, 57, 58, 59]).mask() == "f000000,0000000f"


@pytest.mark.parametrize(("text", "error"), [("0-x", "not a CPU list"), ("4-2", "runs backwards")])
def test_what_is_no_cpulist_is_refused_naming_it(text: str, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        CpuList.parse(text)


@pytest.mark.parametrize(
    ("read", "holds"),
    [
        ("0-4,10-14", True),
        ("0,1,2,3,4,10,11,12,13,14", True),  # only the set counts
        ("0-4,10-14\n", True),
        ("0-4", False),
        ("0-19", False),
        ("", False),  # nothing read (the process is gone)
        ("unknown", False),
    ],
)
def test_a_read_list_holds_the_planned_one_when_it_names_the_same_cpus(
    read: str, holds: bool
) -> None:
    assert GB10_HOUSEKEEPING.holds(read) is holds


def test_no_cpus_holds_only_an_empty_read() -> None:
    assert NO_CPUS.holds("") and not NO_CPUS.holds("0")
    assert not NO_CPUS


def test_within_and_overlaps_compare_sets() -> None:
    assert CpuList.parse("0-2").within(GB10_HOUSEKEEPING)
    assert not CpuList.parse("4-5").within(GB10_HOUSEKEEPING)
    assert CpuList.parse("4-5").overlaps(GB10_HOUSEKEEPING)
    assert not CpuList.parse("5-9").overlaps(GB10_HOUSEKEEPING)


@pytest.mark.parametrize("stack", SHIPPED)
def test_the_plans_json_keeps_cpu_lists_as_kernel_strings_through_a_round_trip(
    stack: str,
) -> None:
    """`verify --plan` and the stack output read the Plan back from JSON: the same text, the
    same CPU sets, spelled as the kernel spells them."""
    plan = make_plan(load_stack_file(stack))
    text = plan.model_dump_json()
    again = Plan.model_validate_json(text)
    assert again == plan and again.model_dump_json() == text
    for node in json.loads(text)["nodes"]:
        cpus = node["cpus"]
        for key in ("housekeeping", "compute", "irqbalance_banned"):
            assert cpus[key] == CpuList.parse(cpus[key]).kernel(), (node["name"], key)
        cpusets = {c["cpuset"] for c in node["engine_containers"]}
        assert cpusets <= {cpus["compute"], ""}, node["name"]


@pytest.mark.parametrize(("read", "seen"), [("0,1,2,3,4,10-14", "0-4,10-14"), ("0-19", "0-19")])
def test_the_container_resource_sees_drift_only_in_the_set(
    monkeypatch: pytest.MonkeyPatch, read: str, seen: str
) -> None:
    """/proc spelling the declared set its own way is no change; other cores are."""
    monkeypatch.setattr(podman, "cpus_allowed", lambda target, pid: read)
    props = {"cpuset": "0-4,10-14"}
    assert podman.ContainerProvider().cpuset(None, props, {"State": {"Pid": 7}}) == seen  # type: ignore[arg-type]

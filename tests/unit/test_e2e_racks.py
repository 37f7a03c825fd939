"""How CI shares the simulated racks between two workers (tests/conftest.py)."""

from __future__ import annotations

import pytest

from tests.conftest import E2E_SLOWEST_FIRST, HERE, rack_of

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("nodeid", "rack"),
    [
        ("tests/e2e/sim16/test_1_switch.py::test_x[0-3-enp1s0f0np0]", "sim16"),
        ("tests/e2e/sim16/test_3_weights.py::test_y", "sim16"),
        ("tests/e2e/full2/test_2_inference.py::test_z", "full2"),
        ("tests/e2e/test_roles_deploy.py::test_up[a/b::c]", "test_roles_deploy"),
        ("tests/unit/test_plan.py::test_p", "test_plan.py"),
    ],
)
def test_a_package_is_one_rack_and_a_module_is_its_own(nodeid: str, rack: str) -> None:
    assert rack_of(nodeid) == rack


def test_every_rack_named_in_the_order_exists() -> None:
    e2e = HERE / "e2e"
    for rack in E2E_SLOWEST_FIRST:
        assert (e2e / rack).is_dir() or (e2e / f"{rack}.py").is_file(), rack

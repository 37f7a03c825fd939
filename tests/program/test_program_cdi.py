"""GPU access the NVIDIA way, in the resource graph: on every real node the base role makes the
CDI spec for the loaded driver (after installing nvidia-container-toolkit where the profile takes
it from apt); a simulated stack, whose profile declares no GPU access, registers nothing new."""

from __future__ import annotations

from typing import Any

import pytest

from roles.base.role import Base
from sparkrack.config.load import load_stack_file
from sparkrack.plan import make_plan

from .harness import REPO, deployable_cluster, run_program

pytestmark = pytest.mark.program

CDI = "sparkrack:CdiSpec"
PACKAGES = "sparkrack:Packages"


def resources(stack: str) -> list[Any]:
    return list(run_program(stack, deployable_cluster(stack)).mocks.resources)


def of_type(found: list[Any], suffix: str) -> dict[str, Any]:
    return {r.name: r for r in found if r.typ.endswith(suffix)}


def node_names(stack: str) -> list[str]:
    return [node.name for node in make_plan(load_stack_file(stack, REPO / "stacks")).nodes]


@pytest.mark.parametrize("stack", ["gb10-2", "h200-2"])
def test_every_real_node_gets_the_cdi_spec_its_containers_name(stack: str) -> None:
    specs = of_type(resources(stack), CDI)
    assert sorted(specs) == sorted(f"{name}-cdi" for name in node_names(stack))
    for spec in specs.values():
        assert spec.inputs["path"] == "/etc/cdi/nvidia.yaml"
        assert spec.inputs["devices"] == ["nvidia.com/gpu=all"]  # what the containers get
        assert spec.inputs["toolkit_package"] == "nvidia-container-toolkit"


def test_dgx_os_nodes_use_the_toolkit_it_ships() -> None:
    found = resources("gb10-2")
    assert {spec.inputs["toolkit"] for spec in of_type(found, CDI).values()} == {"preinstalled"}
    assert not [name for name in of_type(found, PACKAGES) if name.endswith("-gpu-toolkit")]


def test_gpu_servers_install_the_toolkit_from_apt() -> None:
    found = resources("h200-2")
    names = node_names("h200-2")
    toolkits = {name: r for name, r in of_type(found, PACKAGES).items() if "gpu-toolkit" in name}
    assert sorted(toolkits) == sorted(f"{name}-gpu-toolkit" for name in names)
    for toolkit in toolkits.values():
        assert toolkit.inputs["packages"] == ["nvidia-container-toolkit"]
    assert {spec.inputs["toolkit"] for spec in of_type(found, CDI).values()} == {"apt"}
    # the base packages stay one resource of their own, as before
    assert sorted(n for n in of_type(found, PACKAGES) if n.endswith("-packages")) == sorted(
        f"{name}-packages" for name in names
    )


def registrations(stack: str) -> list[tuple[str, str]]:
    return sorted((r.typ, r.name) for r in resources(stack))


def without_gpu_access(stack: str, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """What the program registered before the base role took on GPU access."""
    with monkeypatch.context() as patched:
        patched.setattr(Base, "gpu_access", lambda *_: None)
        return registrations(stack)


@pytest.mark.parametrize(
    ("stack", "added"),
    [
        # The simulated GB10 declares GPU access as a gb10 does: its nvidia-ctk stand-in is there.
        ("sim-2", ("CdiSpec:{}-cdi",)),
        ("gb10-2", ("CdiSpec:{}-cdi",)),
        ("h200-2", ("CdiSpec:{}-cdi", "Packages:{}-gpu-toolkit")),
    ],
)
def test_a_real_stack_gains_only_the_gpu_resources(
    stack: str, added: tuple[str, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    before = without_gpu_access(stack, monkeypatch)
    now = registrations(stack)
    new = sorted(set(now) - set(before))
    want = sorted(
        (f"pulumi-python:dynamic/sparkrack:{kind}", name.format(node))
        for node in node_names(stack)
        for kind, _, name in (one.partition(":") for one in added)
    )
    assert new == want and not set(before) - set(now)

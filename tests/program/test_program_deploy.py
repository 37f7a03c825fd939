"""One wiring (sparkrack.deploy): the e2e programs register what the real program registers for
the roles they ask for, under the same names, and nothing else."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from sparkrack.config.load import spec_from_config
from sparkrack.plan import Plan, make_plan
from sparkrack.stackspec.roles import NODE_ROLES, ROLE_NAMES
from sparkrack.verify.inventory import service_user

from .harness import REPO, run_program, stack_cluster

pytestmark = pytest.mark.program

E2E_PROGRAMS = REPO / "tests" / "e2e" / "programs"
NODE_ROLE_TYPES = {"Base", "BaseTrust", "Fabric", "CpuPinning", "Podman"}


def run(stack: str, cluster: Any, program: str | None = None) -> list[Any]:
    where = {"program": E2E_PROGRAMS / program / "__main__.py"} if program else {}
    return run_program(stack, cluster, **where).mocks.resources  # type: ignore[arg-type]


def registered(stack: str, cluster: Any, program: str | None = None) -> dict[str, str]:
    """name -> type of every resource the program registers."""
    return {args.name: args.typ for args in run(stack, cluster, program)}


def staged(cluster: Any, model_dir: str) -> Any:
    cluster = copy.deepcopy(cluster)
    cluster["serving"]["weights"] = {"source": "directory", "directory": "/srv/checkpoint"}
    cluster["serving"]["model_dir"] = model_dir
    return cluster


def role_types(resources: dict[str, str]) -> set[str]:
    return {typ.rsplit(":", 1)[1] for typ in resources.values() if ":roles:" in typ}


def test_the_roles_program_registers_the_node_roles_of_the_real_program_by_the_same_names() -> None:
    full = registered("sim-2", stack_cluster("sim-2"))
    roles = registered("sim-2", stack_cluster("sim-2"), "roles")
    assert role_types(roles) == NODE_ROLE_TYPES
    assert role_types(full) > NODE_ROLE_TYPES
    assert set(roles) < set(full), sorted(set(roles) - set(full))


def test_the_weights_program_stages_into_the_stacks_model_dir_as_the_real_program_does() -> None:
    cluster = staged(stack_cluster("sim-2"), "/srv/models")
    full = registered("sim-2", cluster)
    weights = registered("sim-2", cluster, "weights")
    assert role_types(weights) == {"Base", "BaseTrust", "Fabric", "InferenceWeights"}
    store = {name: typ for name, typ in weights.items() if "model" in name or "weights" in name}
    assert store and set(store) <= set(full), sorted(set(store) - set(full))
    assert {"Container", "Image"}.isdisjoint(typ.rsplit(":", 1)[1] for typ in weights.values())
    snapshots = {
        args.name: args.inputs["directory"]
        for args in run("sim-2", cluster, "weights")
        if args.name.endswith("-model-shards")
    }
    assert len(snapshots) == 2
    assert all(path.startswith("/srv/models/hub/") for path in snapshots.values()), snapshots


def test_a_role_outside_the_known_ones_or_no_base_is_refused_before_anything_registers() -> None:
    plan = make_plan(spec_from_config("sim-2", stack_cluster("sim-2")))
    with pytest.raises(ValueError, match="base is needed"):
        plan.deploying({"fabric"})
    with pytest.raises(ValueError, match="no role \\['gpu'\\]"):
        plan.deploying({*ROLE_NAMES, "gpu"})


def test_the_roles_program_exports_the_plan_it_deployed_with_its_roles() -> None:
    """What `sparkrack verify --stack` reads back: the node roles only, in deployment order."""
    where = E2E_PROGRAMS / "roles" / "__main__.py"
    outputs = run_program("sim-2", stack_cluster("sim-2"), program=where).outputs
    assert Plan.model_validate_json(str(outputs["plan"])).deploys == NODE_ROLES
    assert NODE_ROLES == ("base", "fabric", "cpu_pinning", "podman")


def test_the_stacks_roles_settings_reach_the_nodes_and_verification() -> None:
    cluster = copy.deepcopy(stack_cluster("sim-2"))
    cluster["roles"] = {
        "base": {"service_user": {"name": "infer", "home": "/srv/infer"}},
        "inference": {"model_dir": "weights"},
    }
    resources = {args.name: args.inputs for args in run("sim-2", cluster)}
    assert resources["spark-1-service-user"]["name"] == "infer"
    assert resources["spark-2-model-dir"]["path"] == "/srv/infer/weights"
    conf = resources["spark-1-containers-conf"]["path"]
    assert conf == "/srv/infer/.config/containers/containers.conf"
    assert service_user(make_plan(spec_from_config("sim-2", cluster))) == "infer"

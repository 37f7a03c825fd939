"""The program under Pulumi's mocks: it wires every shipped stack and refuses bad ones early."""

from __future__ import annotations

import copy
import json

import pulumi
import pytest

from sparkrack.config.load import load_stack_file, spec_from_config
from sparkrack.plan import Plan, make_plan
from sparkrack.resources.verification import verify_command
from sparkrack.transport import ssh
from sparkrack.transport.target import SshError
from tests.unit.support import plan_of

from .harness import REPO, RecordingMocks, deployable_cluster, run_program, stack_cluster

pytestmark = pytest.mark.program

SHIPPED_STACKS = sorted(p.name.split(".")[1] for p in (REPO / "stacks").glob("Pulumi.*.yaml"))


def test_every_design_stack_ships() -> None:
    assert {"gb10-2", "gb10-16", "h200-2", "sim-2", "sim-16"} <= set(SHIPPED_STACKS)


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_program_exports_the_plan_the_cli_computes(stack: str) -> None:
    cluster = deployable_cluster(stack)
    run = run_program(stack, cluster)

    expected = make_plan(spec_from_config(stack, cluster, base_dir=REPO / "stacks"))
    assert run.outputs["plan_digest"] == expected.digest()
    assert run.outputs["nodes"] == [node.name for node in expected.nodes]


@pytest.mark.parametrize("stack", [s for s in SHIPPED_STACKS if not s.startswith("sim-")])
def test_a_real_stack_without_its_models_repository_stops_before_any_resource(stack: str) -> None:
    mocks = RecordingMocks()
    with pytest.raises(pulumi.RunError) as refused:
        run_program(stack, stack_cluster(stack), mocks)
    assert f"stack {stack}: model.hf_repo, model.revision: " in str(refused.value)
    assert f"`sparkrack model pin --stack {stack} --repo ORG/NAME`" in str(refused.value)
    assert mocks.resources == []


@pytest.mark.parametrize("stack", [s for s in SHIPPED_STACKS if not s.startswith("sim-")])
def test_a_real_stack_on_an_unpinned_engine_stops_before_any_resource(stack: str) -> None:
    cluster = deployable_cluster(stack)
    cluster["serving"]["engine"]["build"]["base"] = "docker.io/vllm/vllm-openai:nightly"
    mocks = RecordingMocks()
    with pytest.raises(pulumi.RunError) as refused:
        run_program(stack, cluster, mocks)
    assert f"stack {stack}: serving.engine.build.base: " in str(refused.value)
    assert "is not pinned" in str(refused.value)
    assert mocks.resources == []


def test_bad_stack_stops_before_any_resource() -> None:
    cluster = copy.deepcopy(stack_cluster("sim-2"))
    cluster["serving"].setdefault("env", {})["NCCL_IB_DISABLE"] = "1"

    mocks = RecordingMocks()

    with pytest.raises(pulumi.RunError) as refused:
        run_program("sim-2", cluster, mocks)

    message = str(refused.value)
    assert "stack sim-2" in message
    assert "NCCL_IB_DISABLE" in message
    assert mocks.resources == []


def registered(run_mocks: RecordingMocks, type_suffix: str) -> list[str]:
    return sorted(r.name for r in run_mocks.resources if r.typ.endswith(type_suffix))


def test_sim2_registers_every_role_and_link_per_node() -> None:
    run = run_program("sim-2", stack_cluster("sim-2"))
    plan = make_plan(load_stack_file("sim-2", REPO / "stacks"))
    names = [node.name for node in plan.nodes]
    for role, suffix in (("Base", "base"), ("Fabric", "fabric"), ("Podman", "podman")):
        assert registered(run.mocks, f"sparkrack:roles:{role}") == [f"{n}-{suffix}" for n in names]
    assert registered(run.mocks, "sparkrack:roles:CpuPinning") == [
        f"{n}-cpu-pinning" for n in names
    ]
    links = sorted(f"{node.name}-{link.netdev}" for node in plan.nodes for link in node.links)
    assert [name for name in sorted(r.name for r in run.mocks.resources) if name in links] == links
    # SSH trust: only the head makes a key; every other node authorizes it. Trust is its own
    # component, so the roles that wait on Base never wait on a peer being up.
    assert registered(run.mocks, "sparkrack:roles:BaseTrust") == [f"{n}-trust" for n in names]
    assert [r.name for r in run.mocks.resources if r.name.endswith("-trust-key")] == [
        "spark-1-trust-key"
    ]
    assert [r.name for r in run.mocks.resources if r.name.endswith("-authorized-head")] == [
        "spark-2-authorized-head"
    ]


def test_a_dhcp_rack_leases_every_link_with_busybox_and_sets_no_address_itself() -> None:
    cluster = stack_cluster("sim-16")
    cluster["fabric"]["addressing"] = "dhcp"
    run = run_program("sim-16", cluster)
    plan = plan_of("sim-16", cluster)
    names = {r.name for r in run.mocks.resources}
    for node in plan.nodes:
        assert {f"{node.name}-dhcp-client", f"{node.name}-udhcpc-unit"} <= names
        for link in node.links:
            assert f"{node.name}-dhcp-{link.netdev}" in names
            assert f"{node.name}-{link.netdev}" not in names  # no Link: udhcpc owns the address
    packages = [r.inputs["packages"] for r in run.mocks.resources if r.name.endswith("-client")]
    assert packages == [["busybox-static"]] * 16


def test_with_a_node_unavailable_what_spans_the_rack_stands_still_and_nothing_else(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Ray's gates, the rollout and `vllm serve` wait for every node: marked to stand still, so
    `up` waits on nothing that cannot come and ends with its summary (issue 33, item 5)."""
    whole = run_program("sim-2", stack_cluster("sim-2"))
    assert not any("standing" in r.inputs.get("connection", {}) for r in whole.mocks.resources)
    down = "node spark-2 (198.18.0.12): unreachable on port 22: timed out"
    unusable = {"spark-2": SshError(down)}
    monkeypatch.setattr(ssh, "unavailable", lambda targets, only_pinned=False: unusable)
    monkeypatch.setattr(pulumi.log, "error", lambda message, *a, **k: None)

    run = run_program("sim-2", stack_cluster("sim-2"))

    standing = sorted(
        r.name for r in run.mocks.resources if r.inputs.get("connection", {}).get("standing")
    )
    assert standing == [
        "spark-1-engine-rollout",
        "spark-1-engine-transport",
        "spark-1-ray-cluster",
        "spark-1-served-model",
        "spark-1-vllm",
    ]


def test_up_ends_with_a_verify_command_handed_the_programs_own_plan() -> None:
    """The command reads the Plan on its stdin (`--plan -`), the very JSON the program exports
    for `sparkrack verify --stack`, and the engine image id the head's image reads (exported
    too); it runs again when the Plan's digest or that image changes."""
    # as the engine hands the program sim-2's config: its API key is a secret there
    key = {"sparkrack:apiKey": "sim-key"}
    run = run_program("sim-2", stack_cluster("sim-2"), None, key, list(key))
    [verify] = [r for r in run.mocks.resources if r.typ == "command:local:Command"]
    plan = make_plan(load_stack_file("sim-2", REPO / "stacks"))
    assert verify.name == "verify"
    # The head's image id is known once it is loaded there (unknown to a preview, as here).
    [digest_trigger, image_trigger] = verify.inputs["triggers"][1:]
    assert verify.inputs["triggers"][0] == "sim-2" and digest_trigger == plan.digest()
    assert not isinstance(image_trigger, str) and "engine_image_id" in run.outputs
    assert verify_command("sha256:ab").endswith("verify --plan - --summary --image-id sha256:ab")
    assert "--image-id" not in verify_command(None)  # no engine deployed
    assert Plan.model_validate_json(verify.inputs["stdin"]) == plan
    assert run.outputs["plan"] == verify.inputs["stdin"]


def test_the_plan_handed_to_verification_and_exported_holds_no_secret() -> None:
    """The secrets reach the resources that need them as Pulumi secrets, never the Plan."""
    canary = {
        "sparkrack:hfToken": "hf_canaryTOKEN42",
        "sparkrack:grafanaAdminPassword": "pw-42",
        "sparkrack:apiKey": "api-key-42",
    }
    cluster = stack_cluster("sim-2")
    cluster["monitoring"]["grafana_image"] = "docker.io/grafana/grafana:12.0.2"
    cluster["serving"]["weights"] = {"source": "download"}  # the head's download reads the token
    run = run_program("sim-2", cluster, None, canary, list(canary))
    inputs = {r.name: json.dumps(r.inputs, default=str) for r in run.mocks.resources}
    for value in canary.values():
        assert any(value in text for text in inputs.values()), f"{value} reached no resource"
        assert value not in inputs["verify"]
        assert value not in str(run.outputs["plan"])


@pytest.mark.parametrize("key", ["hfToken", "grafanaAdminPassword"])
def test_a_secret_set_as_plain_text_is_refused_with_the_command_to_fix_it(key: str) -> None:
    mocks = RecordingMocks()
    with pytest.raises(pulumi.RunError) as refused:
        run_program("sim-2", stack_cluster("sim-2"), mocks, {f"sparkrack:{key}": "hunter2"})
    message = str(refused.value)
    assert f"stack sim-2: sparkrack:{key}: set as plain text" in message
    assert f"pulumi config set --secret sparkrack:{key} <value> --stack sim-2" in message
    assert "hunter2" not in message
    assert mocks.resources == []


def test_the_same_value_as_a_secret_is_taken() -> None:
    config = {"sparkrack:grafanaAdminPassword": "hunter2"}
    secret = ["sparkrack:grafanaAdminPassword"]
    run = run_program("sim-2", stack_cluster("sim-2"), None, config, secret)
    assert run.outputs["nodes"] == ["spark-1", "spark-2"]


def test_an_unavailable_node_is_said_once_and_nothing_is_verified(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    refused = "node spark-2 (198.18.0.12): host key mismatch: it offers ssh-ed25519 SHA256:a"
    unusable = {"spark-2": SshError(refused)}
    monkeypatch.setattr(ssh, "unavailable", lambda targets, only_pinned=False: unusable)
    logged: list[str] = []
    monkeypatch.setattr(pulumi.log, "error", lambda message, *a, **k: logged.append(message))

    run = run_program("sim-2", stack_cluster("sim-2"))

    assert logged == [f"{refused}; nothing on it was read or changed"]
    commands = registered(run.mocks, "command:local:Command")
    assert "verify" not in commands  # it runs again at the next up that reaches every node
    assert registered(run.mocks, "sparkrack:roles:Base") == ["spark-1-base", "spark-2-base"]

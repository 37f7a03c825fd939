"""The API's key under Pulumi's mocks: from the Pulumi secret sparkrack:apiKey into the head's
Podman over stdin, and nowhere else the program registers: not the engine's unit file, command
line or env, not the readiness gate, not the outputs."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any, cast

import pulumi
import pytest
from pulumi.runtime import rpc
from pulumi.runtime.sync_await import _sync_await

from roles.inference.role import keyed
from sparkrack.resources.podman_secret import PodmanSecret

from .harness import RecordingMocks, deployable_cluster, run_program

pytestmark = pytest.mark.program

KEY = "k3y-of-the-api-0123456789abcdef"
SECRET_OPTION = "--secret=sparkrack-api-key,type=env,target=VLLM_API_KEY"


def keyed_run() -> tuple[dict[str, Any], dict[str, Any]]:
    config, secret = {"sparkrack:apiKey": KEY}, ["sparkrack:apiKey"]
    run = run_program("sim-2", deployable_cluster("sim-2"), None, config, secret)
    return {r.name: r for r in run.mocks.resources}, run.outputs


def test_the_key_goes_to_the_heads_podman_secret_and_nowhere_else() -> None:
    found, outputs = keyed_run()
    secret = found["spark-1-api-key"]
    assert secret.typ.endswith(":PodmanSecret")
    assert secret.inputs["name"] == "sparkrack-api-key"
    value = secret.inputs["value"]  # Pulumi's secret envelope: encrypted in the state
    assert value == {rpc._special_sig_key: rpc._special_secret_sig, "value": KEY}
    elsewhere = [name for name, r in found.items() if name != "spark-1-api-key"]
    leaking = [name for name in elsewhere if KEY in json.dumps(found[name].inputs, default=str)]
    assert leaking == []
    assert KEY not in json.dumps(outputs, default=str)


def test_vllm_reads_it_from_the_secret_and_the_gate_asks_with_it() -> None:
    found, _ = keyed_run()
    api = found["spark-1-vllm"].inputs
    assert SECRET_OPTION in json.dumps(api, default=str)
    assert not [arg for arg in api["command"] if arg.startswith("--api-key")]  # not in `ps`
    assert found["spark-1-served-model"].inputs["key_secret"] == "sparkrack-api-key"


def test_without_a_key_the_api_asks_for_none() -> None:
    run = run_program("sim-2", deployable_cluster("sim-2"))
    found = {r.name: r for r in run.mocks.resources}
    assert "spark-1-api-key" not in found
    assert SECRET_OPTION not in json.dumps(found["spark-1-vllm"].inputs, default=str)
    assert found["spark-1-served-model"].inputs.get("key_secret") is None


def test_the_key_set_as_plain_text_is_refused_before_any_resource() -> None:
    mocks = RecordingMocks()
    with pytest.raises(pulumi.RunError) as refused:
        run_program("sim-2", deployable_cluster("sim-2"), mocks, {"sparkrack:apiKey": KEY})
    message = str(refused.value)
    assert "stack sim-2: sparkrack:apiKey: set as plain text" in message
    assert KEY not in message and mocks.resources == []


@pytest.mark.parametrize(
    ("changed_at", "rollout"), [(0.0, "g1"), (1700000000.0, "g1 key 1700000000.0")]
)
def test_the_apis_rollout_takes_its_keys_last_change(changed_at: float, rollout: str) -> None:
    """vLLM reads its key when it starts: a changed key restarts it; before any change its
    rollout is the engine's generation alone, as it was before keys could change."""
    pulumi.runtime.set_mocks(RecordingMocks(), preview=False)
    secret = SimpleNamespace(changed_at=pulumi.Output.from_input(changed_at))
    keyed_rollout = keyed(pulumi.Output.from_input("g1"), [cast(PodmanSecret, secret)])
    assert _sync_await(keyed_rollout.future()) == rollout
    generation = pulumi.Output.from_input("g1")
    assert keyed(generation, []) is generation  # an API without a key: the generation alone

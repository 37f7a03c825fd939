"""The OpenAI API's key (the Pulumi secret sparkrack:apiKey): the stacks that set it plan an API
that asks for it, the key itself never enters the spec, the Plan or `plan`'s output, and every
client sparkrack has sends it."""

from __future__ import annotations

import base64
import hashlib
import re
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from sparkrack.cli import main
from sparkrack.config.load import load_stack_file
from sparkrack.config.secrets import API_KEY_ENV, api_key_of
from sparkrack.ops.bench.openai_stream import Endpoint, EndpointError, stream_completion
from sparkrack.plan import make_plan
from sparkrack.plan.engine import API_CONTAINER, engine_containers
from sparkrack.sim.standin import api, serve_args
from sparkrack.stackspec.errors import SpecError
from tests.e2e.conftest import SIM_API_KEY, SIM_PASSPHRASE
from tests.unit.support import STACKS, cluster, refusal

pytestmark = pytest.mark.unit

SECRET_OPTION = "--secret=sparkrack-api-key,type=env,target=VLLM_API_KEY"


def stack_file(tmp_path: Path, config: dict[str, object]) -> Path:
    """A copy of sim-2's stack file with `config` beside its cluster, in a stacks directory."""
    document = yaml.safe_load((STACKS / "Pulumi.sim-2.yaml").read_text())
    document["config"] = {"sparkrack:cluster": document["config"]["sparkrack:cluster"], **config}
    (tmp_path / "Pulumi.sim-2.yaml").write_text(yaml.safe_dump(document))
    return tmp_path


@pytest.mark.parametrize("stack", ["sim-2", "sim-16"])
def test_the_sim_stacks_set_a_key_and_their_api_asks_for_it(stack: str) -> None:
    plan = make_plan(load_stack_file(stack, STACKS))
    assert plan.serving.api_key_secret == "sparkrack-api-key"
    vllm = next(
        c for c in engine_containers(plan, plan.node(plan.head_node)) if c.name == API_CONTAINER
    )
    assert SECRET_OPTION in vllm.options  # vLLM's env from the secret, never its command line
    assert not [arg for arg in vllm.command if "api-key" in arg]
    assert SIM_API_KEY not in plan.model_dump_json()


@pytest.mark.parametrize("stack", ["sim-2", "sim-16"])
def test_the_sim_stacks_key_is_a_secret_under_the_sim_passphrase(stack: str) -> None:
    config = yaml.safe_load((STACKS / f"Pulumi.{stack}.yaml").read_text())
    _, salt, *check = config["encryptionsalt"].split(":")
    key = hashlib.pbkdf2_hmac("sha256", SIM_PASSPHRASE.encode(), base64.b64decode(salt), 10**6, 32)

    def decrypt(version: str, nonce: str, sealed: str) -> bytes:
        assert version == "v1"
        return AESGCM(key).decrypt(base64.b64decode(nonce), base64.b64decode(sealed), None)

    assert decrypt(*check) == b"pulumi"  # Pulumi's own check of the passphrase
    secure = config["config"]["sparkrack:apiKey"]["secure"]
    assert decrypt(*secure.split(":")) == SIM_API_KEY.encode()


def test_a_stack_without_the_key_plans_an_api_that_asks_for_none(tmp_path: Path) -> None:
    plan = make_plan(load_stack_file("sim-2", stack_file(tmp_path, {})))
    assert plan.serving.api_key_secret is None
    vllm = engine_containers(plan, plan.node(plan.head_node))[-1]
    assert not [option for option in vllm.options if option.startswith("--secret")]


def test_plan_prints_neither_the_key_nor_its_ciphertext(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--stack", "sim-2", "--stacks-dir", str(STACKS)]) == 0
    printed = capsys.readouterr().out
    secure = yaml.safe_load((STACKS / "Pulumi.sim-2.yaml").read_text())["config"]
    assert SIM_API_KEY not in printed
    assert secure["sparkrack:apiKey"]["secure"] not in printed
    assert not re.search(r"api[-_]key\s*[=:]?\s*\S*sparkrack-sim", printed)


def test_the_key_as_plain_text_in_the_stack_file_is_refused_by_plan(tmp_path: Path) -> None:
    stacks = stack_file(tmp_path, {"sparkrack:apiKey": "plain-key-0123456789"})
    with pytest.raises(SpecError) as refused:
        load_stack_file("sim-2", stacks)
    message = str(refused.value)
    assert "stack sim-2: sparkrack:apiKey: set as plain text" in message
    assert "pulumi config set --secret sparkrack:apiKey <value> --stack sim-2" in message
    assert "plain-key" not in message


def test_the_stack_cannot_say_the_api_has_a_key_only_the_secret_can() -> None:
    raw = cluster("sim-2")
    raw["serving"]["api_key"] = True
    assert refusal("sim-2", raw).startswith(
        "stack sim-2: serving.api_key: set from whether the Pulumi secret sparkrack:apiKey is"
    )


def test_a_clients_key_comes_from_the_environment_first(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(API_KEY_ENV, "from-the-env")
    assert api_key_of("sim-2", tmp_path) == "from-the-env"
    monkeypatch.delenv(API_KEY_ENV)
    monkeypatch.setenv("PATH", str(tmp_path))  # no pulumi CLI to decrypt the stack's
    with pytest.raises(SpecError, match=f"no pulumi CLI to read it: set {API_KEY_ENV}"):
        api_key_of("sim-2", tmp_path)


@pytest.fixture
def keyed_api() -> Iterator[str]:
    """The stand-in's API (as vLLM's: /v1 asks for the key) on a free local port."""
    args = serve_args.parse_args(["serve", "m", "--host", "127.0.0.1", "--port", "0"])
    server = api.StandinServer(("127.0.0.1", 0), args, "the-key")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    thread.join(5)


def test_bench_s_client_sends_the_key_and_never_shows_it(keyed_api: str) -> None:
    keyed = Endpoint(keyed_api, "the-key")
    assert keyed.models() == ["m"]
    assert stream_completion(keyed, "m", "hi", 2).completion_tokens == 2
    assert "the-key" not in repr(keyed)
    with pytest.raises(EndpointError, match="HTTP 401"):
        Endpoint(keyed_api).models()
    with pytest.raises(EndpointError, match="HTTP 401"):
        stream_completion(Endpoint(keyed_api, "another"), "m", "hi", 2)

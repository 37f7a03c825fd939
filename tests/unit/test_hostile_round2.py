"""Hostile stacks, round 2: what had no grammar or bound. Unbounded text and collections, YAML
aliases, addresses no node has, credentials in the stack, shell text in printed lines, local
files of the wrong kind. Each is refused before any node is touched, in one line naming the
stack and the field, and never repeats the secret it refuses."""

from __future__ import annotations

import os
import shlex
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkrack.cli import main
from sparkrack.cli.report import render_plan
from sparkrack.config.load import load_stack_file
from sparkrack.plan.engine import vllm_command
from sparkrack.stackspec.errors import SpecError
from sparkrack.stackspec.raw import MAX_DEPTH, MAX_ENTRIES, MAX_TEXT
from sparkrack.stackspec.secrets import SECRET_KEYS, names_a_credential, secret_shape

from .support import SHIPPED, STACKS, Cluster, cluster, plan_of, refusal, stacks_dir_with

pytestmark = pytest.mark.unit

HF_TOKEN = "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYz012345"  # the shape only: made up
API_KEY = "sk-proj-" + "a1B2c3D4e5F6g7H8i9J0kLmN"


def one_line(message: str, stack: str = "sim-2") -> str:
    lines = message.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"stack {stack}: "), lines
    return lines[0]


# --- 1. bounds --------------------------------------------------------------------------------


def nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {"leaf": 1}
    for _ in range(depth):
        value = {"a": value}
    return value


deep = nested(20)


@pytest.mark.parametrize(
    ("field", "edit", "says"),
    [
        (
            "serving.env.BIG",
            lambda raw: raw["serving"].update(env={"BIG": "x" * (10 * 2**20)}),
            f"10485760 characters: at most {MAX_TEXT}",
        ),
        (
            "serving.extra_args",
            lambda raw: raw["serving"].update(extra_args=["--x"] * (MAX_ENTRIES + 1)),
            f"{MAX_ENTRIES + 1} entries",
        ),
        (
            "serving.env",
            lambda raw: raw["serving"].update(env={f"A{i}": "1" for i in range(MAX_ENTRIES + 1)}),
            f"at most {MAX_ENTRIES} in one list or mapping",
        ),
        (
            "model.hf_overrides" + ".a" * (MAX_DEPTH - 2),
            lambda raw: raw.update(
                model={"catalog": "minimax-m2.7-awq", "hf_overrides": nested(20)}
            ),
            f"nested more than {MAX_DEPTH} deep",
        ),
        (
            "monitoring.tariff.currency",
            lambda raw: raw.update(monitoring={"tariff": {"per_kwh": 1, "currency": "z" * 5000}}),
            "5000 characters",
        ),
        (
            "serving.env['AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA...] (the name)",
            lambda raw: raw["serving"].update(env={"A" * 2000: "1"}),
            "2000 characters",
        ),
    ],
    ids=["env-10MiB", "extra-args-count", "env-count", "depth", "currency", "env-name"],
)
def test_an_unbounded_value_is_refused_in_one_line_naming_the_field(
    field: str, edit: Any, says: str
) -> None:
    raw = cluster("sim-2")
    edit(raw)
    line = one_line(refusal("sim-2", raw))
    assert line.startswith(f"stack sim-2: {field}: "), line
    assert says in line
    assert len(line) < 400  # the value itself is never repeated


def billion_laughs(levels: int) -> str:
    lines = ['l0: &l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"l{i}: &l{i} [{','.join([f'*l{i - 1}'] * 9)}]" for i in range(1, levels)]
    return "\n".join(lines)


def test_a_billion_laughs_stack_file_is_refused_at_once(tmp_path: Path) -> None:
    text = (STACKS / "Pulumi.sim-2.yaml").read_text()
    laughs = "".join(f"      {line}\n" for line in billion_laughs(9).splitlines())
    text = text.replace("  sparkrack:cluster:\n", "  sparkrack:cluster:\n    laughs:\n" + laughs)
    (tmp_path / "Pulumi.laughs.yaml").write_text(text)
    assert len(text) < 5000
    started = time.monotonic()
    with pytest.raises(SpecError) as refused:
        load_stack_file("laughs", tmp_path)
    assert time.monotonic() - started < 1
    line = one_line(str(refused.value), "laughs")
    assert "found the alias *l0" in line and "aliases are refused" in line


def test_an_anchor_without_an_alias_is_only_a_name(tmp_path: Path) -> None:
    text = (STACKS / "Pulumi.sim-2.yaml").read_text()
    text = text.replace("  sparkrack:cluster:\n", "  sparkrack:cluster: &rack\n")
    (tmp_path / "Pulumi.sim-2.yaml").write_text(text)
    assert load_stack_file("sim-2", tmp_path).stack == "sim-2"


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("config: {sparkrack:cluster: [1\n", "is not valid YAML: line 2, column 1:"),
        ("config:\n  a: 1\n  a: 2\n", "found the key 'a' twice"),
        ("\xff\xfe", "is not UTF-8 text"),
        ("[" * 5000, "is nested too deep to read"),
        ("a: " + "9" * 5000 + "\n", "holds a value too large to read (Exceeds the limit"),
        ("# " + "x" * 300_000 + "\n", "a stack or model file is at most 256 KiB"),
    ],
    ids=["syntax", "twice", "not-utf8", "deep", "huge-int", "huge-file"],
)
def test_a_stack_file_sparkrack_cannot_read_is_one_line(
    text: str, says: str, tmp_path: Path
) -> None:
    (tmp_path / "Pulumi.odd.yaml").write_bytes(text.encode("latin-1"))
    with pytest.raises(SpecError) as refused:
        load_stack_file("odd", tmp_path)
    assert says in one_line(str(refused.value), "odd")


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ("name: " + "m" * 5000 + "\n", "model.name: 5000 characters"),
        (f"name: m\nhf_overrides: {{token: {HF_TOKEN}}}\n", "model.hf_overrides.token: holds a"),
        ("name: &n m\nquantization: *n\n", "model.file: "),
    ],
    ids=["long-name", "token", "alias"],
)
def test_a_model_file_is_held_to_the_stacks_bounds(body: str, says: str, tmp_path: Path) -> None:
    (tmp_path / "model.yaml").write_text(body)
    raw = cluster("sim-2")
    raw["model"] = {"file": str(tmp_path / "model.yaml")}
    line = one_line(refusal("sim-2", raw))
    assert line.startswith(f"stack sim-2: {says}"), line
    assert "m" * 1100 not in line and HF_TOKEN not in line


def test_a_model_file_that_never_ends_is_refused_unread() -> None:
    raw = cluster("sim-2")
    raw["model"] = {"file": "/dev/zero"}
    line = one_line(refusal("sim-2", raw))
    assert "model.file: /dev/zero is a device, not a file" in line


# --- 2. address kinds -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("address", "kind"),
    [
        ("0.0.0.0", "an unspecified"),
        ("0.1.2.3", "an unspecified"),
        ("::", "an unspecified"),
        ("127.0.0.1", "a loopback"),
        ("127.1.2.3", "a loopback"),
        ("::1", "a loopback"),
        ("::ffff:127.0.0.1", "a loopback"),
        ("169.254.10.1", "a link-local"),
        ("fe80::1", "a link-local"),
        ("224.0.0.1", "a multicast"),
        ("239.1.1.1", "a multicast"),
        ("ff02::1", "a multicast"),
        ("255.255.255.255", "a broadcast"),
    ],
)
def test_an_address_no_node_has_is_refused_naming_its_kind(address: str, kind: str) -> None:
    raw = cluster("sim-2")
    raw["nodes"][1]["address"] = address
    line = one_line(refusal("sim-2", raw))
    assert line.startswith("stack sim-2: nodes[1] (spark-2).address: "), line
    assert f"{kind} address, no node's own" in line


@pytest.mark.parametrize("name", ["localhost", "LocalHost", "api.localhost"])
def test_a_name_for_loopback_is_refused(name: str) -> None:
    raw = cluster("sim-2")
    raw["nodes"][0]["address"] = name
    assert "names the loopback address" in one_line(refusal("sim-2", raw))


# A host name passes the spec but not the plan: the node fence admits nodes by address
# (tests/unit/test_fence.py).
@pytest.mark.parametrize("address", ["198.18.0.99", "10.0.0.1", "192.168.1.5", "fd00::5"])
def test_an_ordinary_address_is_taken(address: str) -> None:
    raw = cluster("sim-2")
    raw["nodes"][1]["address"] = address
    assert plan_of("sim-2", raw).nodes[1].address == address


@pytest.mark.parametrize(
    ("subnet", "kind"),
    [("127.0.0.0/16", "loopback"), ("169.254.0.0/16", "link-local"), ("224.0.0.0/8", "multicast")],
)
def test_a_fabric_pool_of_such_addresses_is_refused(subnet: str, kind: str) -> None:
    raw = cluster("gb10-2")
    raw["fabric"]["subnet"] = subnet
    line = one_line(refusal("gb10-2", raw), "gb10-2")
    assert line.startswith("stack gb10-2: fabric: ") and f"holds {kind} addresses" in line


# --- 3. credentials ---------------------------------------------------------------------------


def plan_cli(tmp_path: Path, raw: Cluster, config: dict[str, Any] | None = None) -> list[str]:
    """`sparkrack plan` of `raw` as stack x with more `config`: its exit and its stderr lines."""
    document = {"config": {"sparkrack:cluster": raw, **(config or {})}}
    (tmp_path / "Pulumi.x.yaml").write_text(yaml.safe_dump(document))
    return [str(main(["plan", "--stack", "x", "--stacks-dir", str(tmp_path)]))]


@pytest.mark.parametrize("key", sorted(SECRET_KEYS))
def test_plan_refuses_a_plain_secret_as_the_program_does(
    key: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert plan_cli(tmp_path, cluster("sim-2"), {f"sparkrack:{key}": "hunter2"}) == ["2"]
    printed = capsys.readouterr()
    assert printed.err.splitlines() == [
        f"sparkrack: stack x: sparkrack:{key}: set as plain text: remove it from the stack file"
        f" and run `pulumi config set --secret sparkrack:{key} <value> --stack x`"
    ]
    assert "hunter2" not in printed.out + printed.err


def test_plan_takes_a_secret_that_pulumi_encrypted(tmp_path: Path) -> None:
    secure = {f"sparkrack:{key}": {"secure": "v1:AAAA:BBBB"} for key in SECRET_KEYS}
    assert plan_cli(tmp_path, cluster("sim-2"), secure) == ["0"]


def put(raw: Cluster, where: str, value: str) -> None:
    if where == "env":
        raw["serving"]["env"] = {"MY_SETTING": value}
    elif where == "extra_args":
        raw["serving"]["extra_args"] = ["--chat-template", value]
    elif where == "hf_overrides":
        raw["model"] = {"catalog": "minimax-m2.7-awq", "hf_overrides": {"note": value}}
    elif where == "served_model_name":
        raw["serving"]["served_model_name"] = value
    else:
        raw["ssh"]["user"] = value


FIELDS = {
    "env": "serving.env.MY_SETTING",
    "extra_args": "serving.extra_args[1]",
    "hf_overrides": "model.hf_overrides.note",
    "served_model_name": "serving.served_model_name",
    "ssh_user": "ssh.user",
}
SHAPES = {
    "hf": HF_TOKEN,
    "openai": API_KEY,
    "github": "ghp_" + "x" * 36,
    "aws": "AKIA" + "ABCDEFGHIJKLMNOP",
    "url": "https://me:pa55word@hub.example",
    "bearer": "Bearer " + "a" * 30,
}


@pytest.mark.parametrize("where", sorted(FIELDS))
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_a_credential_shaped_value_is_refused_wherever_it_is_and_never_repeated(
    where: str, shape: str
) -> None:
    raw = cluster("sim-2")
    put(raw, where, SHAPES[shape])
    line = one_line(refusal("sim-2", raw))
    assert line.startswith(f"stack sim-2: {FIELDS[where]}: holds "), line
    assert SHAPES[shape] not in line and SHAPES[shape][8:] not in line
    assert "Pulumi secret" in line


def test_a_hub_token_is_pointed_at_its_secret() -> None:
    raw = cluster("sim-2")
    put(raw, "env", HF_TOKEN)
    assert "`pulumi config set --secret sparkrack:hfToken <value> --stack sim-2`" in refusal(
        "sim-2", raw
    )


@pytest.mark.parametrize(
    "args",
    [["--api-key", "abc"], ["--api-key=abc"], ["--hf-token", "x"], ["--hf-token=x"]],
)
def test_an_engine_flag_that_takes_a_credential_is_refused(args: list[str]) -> None:
    raw = cluster("sim-2")
    raw["serving"]["extra_args"] = args
    line = one_line(refusal("sim-2", raw))
    assert line.startswith("stack sim-2: serving.extra_args[0]: --"), line
    assert "passes a credential" in line and "abc" not in line


@pytest.mark.parametrize(
    "flag",
    ["--max-num-batched-tokens", "--return-tokens-as-token-ids", "--ssl-keyfile", "--tokenizer"],
)
def test_a_flag_that_only_mentions_tokens_or_keys_is_no_credential(flag: str) -> None:
    assert not names_a_credential(flag)


@pytest.mark.parametrize("name", ["--api-key", "HF_TOKEN", "OPENAI_API_KEY", "DB_PASSWORD"])
def test_a_name_that_says_it_holds_a_credential_is_one(name: str) -> None:
    assert names_a_credential(name)


@pytest.mark.parametrize("stack", SHIPPED)
def test_a_shipped_stacks_plan_prints_nothing_secret_nor_for_a_shell(
    stack: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["plan", "--stack", stack, "--stacks-dir", str(STACKS)]) == 0
    printed = capsys.readouterr().out
    assert secret_shape(printed) is None
    [line] = [line for line in printed.splitlines() if line.strip().startswith("vllm serve")]
    assert shlex.split(line) == list(vllm_command(plan_of(stack, cluster(stack))))


# --- 4. shell text ------------------------------------------------------------------------------


def test_the_printed_engine_line_is_what_a_shell_reads_back() -> None:
    raw = cluster("sim-2")
    raw["serving"]["extra_args"] = ["--chat-template=$(touch /tmp/pwned) `id`; x", "a b"]
    plan = plan_of("sim-2", raw)
    [line] = [line for line in render_plan(plan).splitlines() if "vllm serve" in line]
    assert shlex.split(line) == list(vllm_command(plan))
    assert "'--chat-template=$(touch /tmp/pwned) `id`; x'" in line


@pytest.mark.parametrize("name", ["$(reboot)", "a b", "m;id", "`id`", "m" * 129])
def test_a_model_name_follows_the_served_name_grammar(name: str) -> None:
    raw = cluster("sim-2")
    raw["model"] = {"catalog": "minimax-m2.7-awq", "name": name}
    line = one_line(refusal("sim-2", raw))
    assert line.startswith("stack sim-2: model.name: "), line
    assert "a served model name" in line


# --- 5. local files -----------------------------------------------------------------------------


@pytest.mark.parametrize("field", ["key_path", "known_hosts"])
def test_an_ssh_file_that_is_a_directory_is_refused_at_plan_time(
    field: str, tmp_path: Path
) -> None:
    raw = cluster("sim-2")
    raw["ssh"][field] = str(tmp_path)
    line = one_line(refusal("sim-2", raw))
    assert line == f"stack sim-2: ssh.{field}: {tmp_path} is a directory, not a file"


def test_a_nodes_own_key_that_is_a_pipe_is_refused(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "key")
    raw = cluster("sim-2")
    raw["nodes"][1]["ssh"] = {"key_path": str(tmp_path / "key")}
    line = one_line(refusal("sim-2", raw))
    assert line.startswith("stack sim-2: nodes[1] (spark-2).ssh.key_path: ")
    assert "is a named pipe, not a file" in line


def test_a_key_that_is_a_file_or_not_there_yet_is_taken(tmp_path: Path) -> None:
    (tmp_path / "id").write_text("key")
    raw = cluster("sim-2")
    raw["ssh"]["key_path"] = str(tmp_path / "id")
    raw["ssh"]["known_hosts"] = str(tmp_path / "not-yet")
    assert plan_of("sim-2", raw).nodes[0].ssh_key_path == str(tmp_path / "id")


def test_the_cli_refuses_a_directory_key_before_any_node(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    raw = cluster("sim-2")
    raw["ssh"]["key_path"] = str(tmp_path)
    stacks = stacks_dir_with(tmp_path, "sim-2", raw)
    # doctor reads the stack file and then the nodes (verify reads no stack file: the Plan
    # deployed, which was refused the same way before any `up`)
    assert main(["doctor", "--stack", "sim-2", "--stacks-dir", str(stacks)]) == 2
    assert "is a directory, not a file" in capsys.readouterr().err

"""A stack value must never run code on the operator's machine: SSH fields are refused by type
at validation, and the OpenSSH config writer refuses or escapes them if they get past it (read
back by OpenSSH itself with `ssh -G`, which evaluates a config without connecting)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from sparkrack.transport.openssh import Tokens, UnsafeValue, host_block, openssh_value
from sparkrack.transport.target import Target
from sparkrack.verify.inventory import build_inventory, ssh_config

from .support import cluster, plan_of, refusal

pytestmark = pytest.mark.unit

PROXY = "sparkrack\n  ProxyCommand touch /tmp/sparkrack-pwned"


@pytest.mark.parametrize(
    ("field", "value", "why"),
    [
        ("user", PROXY, "holds a line break: a POSIX user name is"),
        ("user", "root user", "holds a space: a POSIX user name is"),
        ("user", "Sparkrack", "holds 'S': a POSIX user name is"),
        ("user", "-oProxyCommand=x", "holds 'P': a POSIX user name is"),
        ("key_path", "~/.ssh/id\n  ProxyCommand x", "holds a line break: a path here is one line"),
        ("key_path", 'x" ProxyCommand "y', "holds '\"'"),
        ("key_path", "id_ed25519", "is not an absolute path or one under ~/"),
        ("known_hosts", "~/../../etc/ssh/known_hosts", "climbs out with '..'"),
        ("known_hosts", "/tmp/kh\x1b[2J", "holds the control character U+001B"),
    ],
)
def test_the_stacks_ssh_settings_are_refused_by_type(field: str, value: str, why: str) -> None:
    raw = cluster("sim-2")
    raw["ssh"][field] = value
    message = refusal("sim-2", raw)
    assert f"stack sim-2: ssh.{field}: " in message
    assert why in message


def test_a_nodes_own_ssh_settings_are_refused_too() -> None:
    raw = cluster("sim-2")
    raw["nodes"][1]["ssh"] = {"user": PROXY}
    assert "stack sim-2: nodes[1] (spark-2).ssh.user: " in refusal("sim-2", raw)


@pytest.mark.parametrize("value", ["a\nProxyCommand x", 'a" ProxyCommand "x', "a\rb", "a\x00b", ""])
def test_the_writer_refuses_what_cannot_be_one_argument(value: str) -> None:
    with pytest.raises(UnsafeValue):
        openssh_value("User", value)


def test_the_writer_quotes_spaces_and_escapes_percent_where_openssh_expands_it() -> None:
    assert openssh_value("IdentityFile", "/keys/my key%h") == '"/keys/my key%%h"'
    assert openssh_value("User", "a%b") == "a%b"
    assert openssh_value("ControlPath", Tokens("/tmp/ctl/%C")) == "/tmp/ctl/%C"
    with pytest.raises(UnsafeValue):
        openssh_value("ControlPath", Tokens("/tmp/my ctl/%C"))


def effective(config: str, host: str, tmp_path: Path) -> dict[str, str]:
    """What OpenSSH makes of `config` for `host` (`ssh -G`: parsed, never connected)."""
    path = tmp_path / "ssh_config"
    path.write_text(config)
    done = subprocess.run(
        ["ssh", "-G", "-F", str(path), host], capture_output=True, text=True, check=True
    )
    return dict(line.split(" ", 1) for line in done.stdout.splitlines() if " " in line)


def test_openssh_reads_the_writers_values_back_unchanged(tmp_path: Path) -> None:
    key = str(tmp_path / "my keys" / "id 100%")
    config = host_block(["spark-1"], [("User", "sparkrack"), ("IdentityFile", key)])
    seen = effective(config, "spark-1", tmp_path)
    assert seen["user"] == "sparkrack"
    # one argument, spaces and all; `ssh -G` shows it before the %-expansion at use
    assert seen["identityfile"] == key.replace("%", "%%")
    assert "proxycommand" not in seen


def test_verify_config_forced_past_validation_is_refused_not_written(tmp_path: Path) -> None:
    inventory = build_inventory(plan_of("sim-2", cluster("sim-2")), ("fabric",))
    plan = inventory.plan
    hostile = plan.nodes[1].model_copy(update={"ssh_user": PROXY})  # as if validation let it by
    plan = plan.model_copy(update={"nodes": (plan.nodes[0], hostile)})
    inventory = inventory.model_copy(update={"plan": plan})
    with pytest.raises(UnsafeValue, match="OpenSSH User"):
        ssh_config(inventory, tmp_path)


def test_the_verify_config_of_a_shipped_stack_means_what_the_plan_says(tmp_path: Path) -> None:
    inventory = build_inventory(plan_of("sim-2", cluster("sim-2")), ("fabric",))
    seen = effective(ssh_config(inventory, tmp_path), "spark-2", tmp_path)
    node = Target.for_node(inventory.nodes[1])
    assert (seen["hostname"], seen["user"], seen["port"]) == (node.host, node.user, str(node.port))
    assert seen["controlpath"].startswith(str(tmp_path))

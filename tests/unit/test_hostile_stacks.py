"""Malformed stacks, as a careless or hostile contributor would write them: each is refused before
any node is touched, in words that name the stack, the field (and node) and what is wrong."""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkrack.cli import main

from .support import Cluster, cluster, refusal

pytestmark = pytest.mark.unit

Edit = Callable[[Cluster], object]


def at(*path: str | int, value: Any) -> Edit:
    """An edit that sets `value` at `path`, making the mappings on the way."""

    def edit(raw: Cluster) -> None:
        here: Any = raw
        for key in path[:-1]:
            here = here.setdefault(key, {}) if isinstance(key, str) else here[key]
        here[path[-1]] = value

    return edit


def profile(**changes: Any) -> Edit:
    """spark-1 on a stack-declared profile: a gx10 with `changes`."""

    def edit(raw: Cluster) -> None:
        raw["hardware_profiles"] = {"odd": {"base": "gx10", **changes}}
        raw["nodes"][0]["hardware"] = "odd"

    return edit


PROXY = "x\n  ProxyCommand touch /tmp/pwned"
WEIGHTS = {"source": "download"}

# (id, stack, edit, what the refusal must say)
HOSTILE = [
    # SSH: what reaches the OpenSSH config verification writes
    ("ssh-user-proxycommand", "gb10-2", at("ssh", "user", value=PROXY), "ssh.user: 'x\\n"),
    ("ssh-user-option", "gb10-2", at("ssh", "user", value="-oProxyCommand=x"), "holds 'P'"),
    ("node-ssh-user", "gb10-2", at("nodes", 1, "ssh", value={"user": "a b"}), "holds a space"),
    ("key-path-quote", "gb10-2", at("ssh", "key_path", value='/k" x "'), "holds '\"'"),
    ("key-path-relative", "gb10-2", at("ssh", "key_path", value="id_rsa"), "not an absolute"),
    ("known-hosts-escape", "gb10-2", at("ssh", "known_hosts", value="/kh\x1b[2J"), "U+001B"),
    ("known-hosts-climbs", "gb10-2", at("ssh", "known_hosts", value="/a/../b"), "'..'"),
    ("ssh-port-zero", "gb10-2", at("ssh", "port", value=0), "ssh.port"),
    # names and addresses
    ("node-lookalike", "gb10-2", at("nodes", 0, "name", value="sp\u0430rk-1"), "CYRILLIC SMALL"),
    ("node-space", "gb10-2", at("nodes", 0, "name", value="spark 1"), "holds a space"),
    ("node-upper", "gb10-2", at("nodes", 0, "name", value="Spark-1"), "holds 'S'"),
    ("node-dash-end", "gb10-2", at("nodes", 0, "name", value="spark-"), "not a node name"),
    ("node-too-long", "gb10-2", at("nodes", 0, "name", value="s" * 64), "1 to 63 characters"),
    ("ipv4-typo", "gb10-2", at("nodes", 0, "address", value="192.168.1.301"), "a typo?"),
    ("address-short", "gb10-2", at("nodes", 0, "address", value="192.168.1"), "a typo?"),
    ("address-injection", "gb10-2", at("nodes", 0, "address", value="h;reboot"), "host name"),
    ("same-address", "gb10-2", at("nodes", 1, "address", value="192.168.1.101"), "also used"),
    ("hardware-slash", "gb10-2", at("nodes", 0, "hardware", value="../gx10"), "holds '/'"),
    # NICs and the fabric
    (
        "mgmt-nic-newline",
        "gb10-2",
        at("nodes", 0, "overrides", value={"management_nic": "e\nx"}),
        "line break",
    ),
    (
        "mgmt-nic-16",
        "gb10-2",
        at("nodes", 0, "overrides", value={"management_nic": "e" * 16}),
        "1 to 15",
    ),
    ("netdev-slash", "gb10-2", profile(management_nic="eth/0"), "holds '/'"),
    (
        "fabric-over-mgmt",
        "gb10-2",
        at("fabric", "subnet", value="192.168.0.0/16"),
        "management address",
    ),
    ("fabric-tiny", "gb10-2", at("fabric", "subnet", value="10.77.0.0/25"), "smaller than one /24"),
    ("mtu-beyond", "gb10-2", at("fabric", "mtu", value=9900), "fabric.mtu"),
    ("cable-to-nobody", "gb10-2", at("fabric", "cables", 0, "b", value="spark-9:port0"), "spark-9"),
    ("sim-beside-real", "gb10-2", at("nodes", 1, "hardware", value="gb10-sim"), "mixes simulated"),
    # images, names and arguments that reach units and the engine's command line
    (
        "image-newline",
        "gb10-2",
        at("serving", "engine", "image", value="a:1\nExecStartPre=/bin/sh"),
        "line break",
    ),
    ("image-subshell", "gb10-2", at("serving", "engine", "image", value="$(reboot)"), "holds '$'"),
    (
        "image-upper",
        "gb10-2",
        at("serving", "engine", "image", value="Vllm/Vllm:1"),
        "not an image reference",
    ),
    (
        "exporters-space",
        "gb10-2",
        at("monitoring", "exporters_image", value="a b"),
        "holds a space",
    ),
    ("grafana-semicolon", "gb10-2", at("monitoring", "grafana_image", value="g;rm"), "holds ';'"),
    ("served-percent", "gb10-2", at("serving", "served_model_name", value="m%h"), "holds '%'"),
    (
        "extra-arg-newline",
        "gb10-2",
        at("serving", "extra_args", value=["--a\nExecStartPre=/x"]),
        "line break",
    ),
    (
        "extra-arg-planned",
        "gb10-2",
        at("serving", "extra_args", value=["--port=1"]),
        "serving.port",
    ),
    ("env-name-space", "gb10-2", at("serving", "env", value={"A B": "1"}), "holds a space"),
    (
        "env-value-newline",
        "gb10-2",
        at("serving", "env", value={"A": "1\nExecStartPre=/x"}),
        "line break",
    ),
    ("env-token", "gb10-2", at("serving", "env", value={"HF_TOKEN": "hf_x"}), "--secret"),
    ("env-nccl-sockets", "gb10-2", at("serving", "env", value={"NCCL_IB_DISABLE": "1"}), "58%"),
    # paths on the nodes, and where the weights come from
    ("model-dir-relative", "gb10-2", at("serving", "model_dir", value="models"), "not an absolute"),
    ("model-dir-climbs", "gb10-2", at("serving", "model_dir", value="/srv/../etc"), "'..'"),
    (
        "weights-dir-newline",
        "gb10-2",
        at("serving", "weights", value={"source": "directory", "directory": "/w\n"}),
        "line break",
    ),
    (
        "revision-a-branch",
        "gb10-2",
        at("model", value={"catalog": "minimax-m2.7-awq", "revision": "main"}),
        "40 hexadecimal digits",
    ),
    (
        "repo-a-placeholder",
        "gb10-2",
        at("model", value={"catalog": "minimax-m2.7-awq", "hf_repo": "PLACEHOLDER/MiniMax"}),
        "PLACEHOLDER/MiniMax is a placeholder, not a repository",
    ),
    (
        "endpoint-ftp",
        "gb10-2",
        at("serving", "weights", value={**WEIGHTS, "endpoint": "ftp://h"}),
        "not an http(s) URL",
    ),
    (
        "endpoint-space",
        "gb10-2",
        at("serving", "weights", value={**WEIGHTS, "endpoint": "https://h x"}),
        "holds a space",
    ),
    (
        "hf-repo-semicolon",
        "gb10-2",
        at("model", value={"catalog": "minimax-m2.7-awq", "hf_repo": "a/b;c"}),
        "holds ';'",
    ),
    (
        "quantization-space",
        "gb10-2",
        at("model", value={"catalog": "minimax-m2.7-awq", "quantization": "a w q"}),
        "holds a space",
    ),
    # sizes and ports
    (
        "size-negative",
        "gb10-2",
        at("nodes", 0, "overrides", value={"gpu_memory": "-5 GiB"}),
        "is negative",
    ),
    ("size-typo", "gb10-2", at("serving", "shm_size", value="16 GiB of shm"), "not a size"),
    (
        "shm-beyond-memory",
        "gb10-2",
        at("serving", "shm_size", value="10 TiB"),
        "GPU memory this node has",
    ),
    (
        "override-more-memory",
        "gb10-2",
        at("nodes", 0, "overrides", value={"gpu_memory": "200 GiB"}),
        "only declares less",
    ),
    (
        "api-on-prometheus",
        "gb10-2",
        at("monitoring", "prometheus_port", value=8000),
        "port 8000 would serve",
    ),
    ("api-on-ray-gcs", "gb10-2", at("serving", "port", value=6379), "Ray's GCS"),
    (
        "exporter-on-ray-agent",
        "gb10-2",
        at("monitoring", "node_exporter_port", value=52365),
        "Ray's",
    ),
    (
        "cadvisor-on-node-exporter",
        "gb10-2",
        at("monitoring", "cadvisor_port", value=9100),
        "cAdvisor",
    ),
    ("port-beyond", "gb10-2", at("serving", "port", value=70000), "serving.port"),
    # monitoring and cost
    (
        "collector-infiniband",
        "gb10-2",
        at("monitoring", "node_exporter_collectors", value=["infiniband"]),
        "hangs",
    ),
    ("scrape-timeout-long", "gb10-2", at("monitoring", "scrape_timeout_s", value=30), "pile up"),
    (
        "currency-newline",
        "gb10-2",
        at("monitoring", "tariff", value={"per_kwh": 1, "currency": "z\n"}),
        "line break",
    ),
    ("typo-key", "gb10-2", at("serving", "enigne", value="x"), "did you mean 'engine'?"),
    (
        "switch-name-space",
        "gb10-16",
        at("fabric", "switch", "name", value="my switch"),
        "holds a space",
    ),
    # the roles' settings: a user, a package, paths under the home
    (
        "service-user-shell",
        "gb10-2",
        at("roles", "base", "service_user", "name", value="root;id"),
        "roles.base.service_user.name",
    ),
    ("package-option", "gb10-2", at("roles", "base", "packages", value=["-y x"]), "a space"),
    (
        "home-path-climbs",
        "gb10-2",
        at("roles", "inference", "model_dir", value="../../etc"),
        "'..'",
    ),
    (
        "home-path-absolute",
        "gb10-2",
        at("roles", "monitoring", "textfile_dir", value="/etc"),
        "not a path relative to the home",
    ),
    (
        "subuid-range",
        "gb10-2",
        at("roles", "base", "service_user", "subuids", value=["1-2"]),
        "start:count",
    ),
]


@pytest.mark.parametrize(
    ("stack", "edit", "says"), [c[1:] for c in HOSTILE], ids=[c[0] for c in HOSTILE]
)
def test_a_hostile_stack_is_refused_in_words(stack: str, edit: Edit, says: str) -> None:
    raw = cluster(stack)
    edit(raw)

    message = refusal(stack, raw)

    assert message.startswith(f"stack {stack}: "), message
    assert says in message, message


def test_the_suite_holds_at_least_forty_stacks() -> None:
    assert len({case[0] for case in HOSTILE}) == len(HOSTILE) >= 40


@pytest.mark.parametrize("case", HOSTILE[:12] + HOSTILE[26:40], ids=lambda c: c[0])
def test_a_refused_stack_opens_no_connection_and_runs_no_ssh(
    case: tuple[str, str, Edit, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, stack, edit, _ = case
    raw = cluster(stack)
    edit(raw)
    (tmp_path / "Pulumi.bad.yaml").write_text(
        yaml.safe_dump({"config": {"sparkrack:cluster": raw}})
    )
    attempts: list[object] = []

    def refuse(*args: object, **kwargs: object) -> None:
        attempts.append(args)
        raise AssertionError("a refused stack reached the network")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(subprocess, "Popen", refuse)

    assert main(["doctor", "--stack", "bad", "--stacks-dir", str(tmp_path)]) == 2
    assert attempts == []

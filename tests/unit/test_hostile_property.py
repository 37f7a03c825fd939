"""Arbitrary text in every string field of a stack: either a clean refusal (a SpecError naming the
stack, nothing else raised) or a value that every generated config carries unchanged in meaning.

OpenSSH's own parser (`ssh -G`) reads the verification config back. Unit files are read back as
systemd.syntax(7) and systemd.service(5) "Command lines" define: words split on blanks, quotes
with C escapes, `%%` for a literal `%` (any other `%` is a specifier), `$$` for a literal `$` on a
command line (a `$NAME` would expand). The e2e container program checks real systemd and Quadlet
on a node with hostile text.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from sparkrack.plan import Plan
from sparkrack.plan.engine import api_container, ray_container
from sparkrack.resources.container_unit import quadlet_unit, run_unit
from sparkrack.stackspec.errors import SpecError
from sparkrack.transport.target import Target
from sparkrack.verify.inventory import build_inventory, ssh_config

from .support import Cluster, cluster, plan_of

pytestmark = pytest.mark.unit

STACK = "sim-2"
# Pieces that have broken configs before, mixed into arbitrary text.
HOSTILE = ["\n", "\r", '"', "'", "\\", "%h", "%%", "$HOME", "${X}", "$(id)", ";", " ", "#", "="]
TEXT = st.one_of(
    st.text(max_size=40),
    st.lists(st.one_of(st.sampled_from(HOSTILE), st.text(max_size=6)), max_size=6).map("".join),
    st.sampled_from(HOSTILE).map(lambda piece: f"localhost/a{piece}b:1"),
)


def setter(*path: str | int) -> Callable[[Cluster, str], None]:
    def put(raw: Cluster, value: str) -> None:
        here: Any = raw
        for key in path[:-1]:
            here = here.setdefault(key, {}) if isinstance(key, str) else here[key]
        here[path[-1]] = value

    return put


def env_name(raw: Cluster, value: str) -> None:
    raw["serving"]["env"] = {value: "1"}


def currency(raw: Cluster, value: str) -> None:
    raw.setdefault("monitoring", {})["tariff"] = {"per_kwh": 1.04, "currency": value}


def extra_arg(raw: Cluster, value: str) -> None:
    raw["serving"]["extra_args"] = [value]


# field -> (how a stack sets it, a valid start that arbitrary text is appended to, so that much
# of what is accepted carries spaces, quotes, `%` and `$`)
FIELDS: dict[str, tuple[Callable[[Cluster, str], None], str]] = {
    "ssh.user": (setter("ssh", "user"), "sparkrack"),
    "ssh.key_path": (setter("ssh", "key_path"), "/keys/"),
    "ssh.known_hosts": (setter("ssh", "known_hosts"), "~/known "),
    "nodes[1].ssh.user": (setter("nodes", 1, "ssh", "user"), "ops"),
    "nodes[1].address": (setter("nodes", 1, "address"), "198.18.0.12"),
    "nodes[1].overrides.management_nic": (setter("nodes", 1, "overrides", "management_nic"), "e"),
    "serving.engine.image": (setter("serving", "engine", "image"), "localhost/x:1"),
    "serving.served_model_name": (setter("serving", "served_model_name"), "m"),
    "serving.model_dir": (setter("serving", "model_dir"), "/srv/models "),
    "serving.env (value)": (setter("serving", "env", "SPARKRACK_TEXT"), ""),
    "serving.env (name)": (env_name, "SPARKRACK_"),
    "serving.extra_args": (extra_arg, "--x="),
    "monitoring.exporters_image": (setter("monitoring", "exporters_image"), "localhost/e"),
    "monitoring.tariff.currency": (currency, "PLN "),
}


# --- systemd, read as systemd reads it -----------------------------------------------------------

C_ESCAPES = {"\\": "\\", '"': '"', "'": "'", "n": "\n", "t": "\t", "r": "\r", "s": " "}


class MeaningChanged(AssertionError):
    pass


def split_words(text: str) -> list[str]:
    """systemd's word splitting with quotes and C escapes."""
    words, i = [], 0
    while i < len(text):
        if text[i] in " \t":
            i += 1
            continue
        word, quote = "", None
        while i < len(text) and (quote or text[i] not in " \t"):
            char = text[i]
            if char == "\\":
                word += C_ESCAPES.get(text[i + 1], "\\" + text[i + 1])
                i += 2
                continue
            if char in "\"'" and quote in (None, char):
                quote = None if quote else char
            else:
                word += char
            i += 1
        words.append(word)
    return words


def expands(after_dollar: str) -> bool:
    return after_dollar[:1].isalnum() or after_dollar[:1] in ("{", "_")


def unspecify(word: str, command: bool) -> str:
    """`%%` -> `%` and, on a command line, `$$` -> `$`; anything systemd would expand fails."""
    out, i = "", 0
    while i < len(word):
        pair = word[i : i + 2]
        if pair == "%%" or (command and pair == "$$"):
            out, i = out + pair[0], i + 2
        elif word[i] == "%" or (command and word[i] == "$" and expands(pair[1:])):
            raise MeaningChanged(f"systemd would expand {word[i:]!r}")
        else:
            out, i = out + word[i], i + 1
    return out


def read_unit(text: str) -> dict[str, list[list[str]]]:
    """setting -> the words of each line that sets it."""
    settings: dict[str, list[list[str]]] = {}
    for line in text.splitlines():
        if "=" in line and not line.startswith(("#", "[")):
            key, value = line.split("=", 1)
            command = key in ("Exec", "ExecStart", "ExecStop", "PodmanArgs")
            words = split_words(value) if command or key == "Environment" else [value]
            settings.setdefault(key, []).append([unspecify(w, command) for w in words])
    return settings


# --- the round trips ---------------------------------------------------------------------------


def engine_props(plan: Plan) -> list[dict[str, Any]]:
    """The Container resource's inputs for every engine container, and one exporters container
    (its image is the monitoring field that reaches a unit)."""
    model_dir = plan.serving.model_dir or "/home/sparkrack/models"
    containers = [ray_container(plan, node, model_dir, "/run/ray") for node in plan.nodes]
    containers.append(api_container(plan, model_dir, "/run/ray", "/var/log/engine.log"))
    props = [{**c.model_dump(), "image": plan.serving.image} for c in containers]
    props.append(
        {"name": "exporters", "image": plan.monitoring.exporters_image, "env": {}, "devices": ()}
        | {"ulimits": {}, "cpuset": "", "options": (), "command": (), "stop_timeout_s": None}
    )
    return [{**p, "restart": "always", "home": "/home/sparkrack"} for p in props]


def assert_units_carry(plan: Plan) -> None:
    for props in engine_props(plan):
        quadlet = read_unit(quadlet_unit(props))
        assert quadlet["Image"] == [[props["image"]]]
        assert quadlet["ContainerName"] == [[props["name"]]]
        env = dict(words[0].split("=", 1) for words in quadlet.get("Environment", []))
        assert env == props["env"]
        assert quadlet.get("Exec", [[]])[0] == list(props["command"])
        cpuset = [f"--cpuset-cpus={props['cpuset']}"] if props["cpuset"] else []
        stop = [f"--stop-timeout={props['stop_timeout_s']}"] if props["stop_timeout_s"] else []
        podman_args = [w for words in quadlet.get("PodmanArgs", []) for w in words]
        assert podman_args == [*cpuset, *stop, *props["options"]]
        start = read_unit(run_unit(props))["ExecStart"][0]
        assert start[len(start) - len(props["command"]) - 1 :] == [
            props["image"],
            *props["command"],
        ]
        env_args = [w for w in start if w.startswith("--env=")]
        assert env_args == [f"--env={k}={v}" for k, v in sorted(props["env"].items())]


def assert_ssh_carries(plan: Plan) -> None:
    inventory = build_inventory(plan, ("fabric",))
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "ssh_config"
        path.write_text(ssh_config(inventory, Path(folder)))
        for node in inventory.nodes:
            done = subprocess.run(
                ["ssh", "-G", "-F", str(path), node.name], capture_output=True, text=True
            )
            assert done.returncode == 0, done.stderr
            seen = dict(line.split(" ", 1) for line in done.stdout.splitlines() if " " in line)
            assert "proxycommand" not in seen and "localcommand" not in seen
            target = Target.for_node(node)
            assert seen["user"] == target.user
            assert seen["hostname"] == target.host.lower()  # names are case-blind
            key = os.path.expanduser(target.key_path).replace("%", "%%")
            assert seen["identityfile"] in (key, target.key_path.replace("%", "%%"))
            known = seen["userknownhostsfile"]
            assert known in (target.known_hosts, os.path.expanduser(target.known_hosts))


@pytest.mark.parametrize("field", sorted(FIELDS))
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=TEXT, after_a_valid_start=st.booleans())
def test_any_text_is_refused_cleanly_or_carried_unchanged(
    field: str, text: str, after_a_valid_start: bool
) -> None:
    put, start = FIELDS[field]
    raw = cluster(STACK)
    put(raw, start + text if after_a_valid_start else text)
    try:
        plan = plan_of(STACK, raw)
    except SpecError as refused:
        lines = str(refused).splitlines()
        assert lines and all(line.startswith(f"stack {STACK}: ") for line in lines), lines
        event("refused")
        return
    event("carried")
    assert_units_carry(plan)
    assert_ssh_carries(plan)

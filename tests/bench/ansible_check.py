"""Benchmark helper, not a test: the same drift check done the Ansible way, for issue 18's ratio.

From the stack's deployed state (`pulumi stack export`) it writes an inventory and a playbook that
check what sparkrack's resources keep on each node: every file (content, mode, owner: `copy` in
check mode), sysctl, systemd unit (system and the service user's), fabric port and container, the
packages and the service user, one task per kind looping over that node's items, as one would
write it by hand. `ansible-playbook --check -f <nodes>` then reads all nodes at once, over the same
SSH keys and pinned host keys. Secret file contents are left out (they are not exported in clear).

ansible-core comes from PyPI into its own virtualenv under ~/.cache/sparkrack (keyed by version).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import yaml

from sparkrack.config.cache import cache_root

ANSIBLE_CORE = "2.17.7"
TYPE = "pulumi-python:dynamic/sparkrack:"

# One task per kind, looping over the node's items (host vars). Reads run in check mode too and
# report a difference as a change, as the modules do (drift, not failure).
USER_ENV = {"XDG_RUNTIME_DIR": "/run/user/{{ service_uid.stdout }}"}


def read(command: str, loop: str | None, drift: str, **more: Any) -> dict[str, Any]:
    task: dict[str, Any] = {
        "ansible.builtin.command": command,
        "check_mode": False,
        "register": "result",
        "changed_when": drift,
        **more,
    }
    return {**task, "loop": loop} if loop else task


TASKS: list[dict[str, Any]] = [
    {"name": "service user", **read("id -u {{ service_user }}", None, "false")},
    {"name": "service uid", "ansible.builtin.set_fact": {"service_uid": "{{ result }}"}},
    {
        "name": "files",
        "ansible.builtin.copy": {
            "dest": "{{ item.path }}",
            "content": "{{ item.content }}",
            "mode": "{{ item.mode }}",
            "owner": "{{ item.owner }}",
            "group": "{{ item.group }}",
        },
        "loop": "{{ files }}",
        "loop_control": {"label": "{{ item.path }}"},
    },
    {
        "name": "sysctls",
        **read(
            "sysctl -n {{ item.key }}",
            "{{ sysctls }}",
            "result.stdout.split() != item.value.split()",
        ),
    },
    {
        "name": "system units",
        "ansible.builtin.systemd_service": {
            "name": "{{ item }}",
            "enabled": True,
            "state": "started",
        },
        "loop": "{{ system_units }}",
    },
    {
        "name": "the service user's units",
        "ansible.builtin.systemd_service": {
            "name": "{{ item }}",
            "enabled": True,
            "state": "started",
            "scope": "user",
        },
        "loop": "{{ user_units }}",
        "become_user": "{{ service_user }}",
        "environment": USER_ENV,
    },
    {
        "name": "fabric ports",
        **read(
            "ip -j addr show dev {{ item.netdev }}",
            "{{ links }}",
            "(result.stdout | from_json)[0].mtu != item.mtu",
        ),
    },
    {
        "name": "containers",
        **read(
            "podman container inspect --format {{ '{{' }}.State.Running{{ '}}' }} {{ item }}",
            "{{ containers }}",
            "result.stdout != 'true'",
            become_user="{{ service_user }}",
            environment=USER_ENV,
        ),
    },
    {
        "name": "packages",
        **read(
            "dpkg-query -W -f '${Status}' {{ item }}",
            "{{ packages }}",
            "'installed' not in result.stdout",
        ),
    },
    {
        "name": "linger",
        **read(
            "loginctl show-user -p Linger {{ service_user }}", None, "'yes' not in result.stdout"
        ),
    },
]


class Unsafe(str):
    """A file's content, which Ansible must not template (dashboards and rules hold `{{ }}`)."""


class Dumper(yaml.SafeDumper):
    pass


Dumper.add_representer(
    Unsafe, lambda dumper, text: dumper.represent_scalar("!unsafe", text, style='"')
)


def resources(export: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(kind, inputs) of every sparkrack node resource in the exported state."""
    found = []
    for resource in export["deployment"].get("resources", []):
        kind = resource.get("type", "")
        if kind.startswith(TYPE):
            found.append((kind.removeprefix(TYPE), resource.get("inputs", {})))
    return found


def host_vars(export: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """node -> the items each task checks there, and how to reach it."""
    nodes: dict[str, dict[str, Any]] = defaultdict(lambda: defaultdict(list))
    for kind, inputs in resources(export):
        node = nodes[inputs["node"]]
        node["connection"] = inputs["connection"]
        add_item(node, kind, inputs)
    return {name: dict(values) for name, values in nodes.items()}


def add_item(node: dict[str, Any], kind: str, inputs: dict[str, Any]) -> None:
    if kind == "RemoteFile" and isinstance(inputs.get("content"), str):
        keys = ("path", "mode", "owner", "group")
        node["files"].append({"content": Unsafe(inputs["content"]), **{k: inputs[k] for k in keys}})
    elif kind == "Sysctl":
        node["sysctls"].append({"key": inputs["key"], "value": str(inputs["value"])})
    elif kind == "Unit" and inputs.get("active"):
        scope = "user_units" if inputs["scope"] == "user" else "system_units"
        node[scope].append(inputs["unit"])
    elif kind == "Link":
        node["links"].append({"netdev": inputs["netdev"], "mtu": inputs["mtu"]})
    elif kind == "Container":
        node["containers"].append(inputs["name"])
        node["service_user"] = inputs["user"]
    elif kind == "Packages":
        node["packages"].extend(inputs["packages"])
    elif kind == "User":
        node["service_user"] = inputs["name"]


def inventory(nodes: dict[str, dict[str, Any]]) -> dict[str, Any]:
    hosts = {}
    for name, values in nodes.items():
        conn = values.pop("connection")
        known = f"-o UserKnownHostsFile={conn['known_hosts']} -o StrictHostKeyChecking=yes"
        hosts[name] = {
            "ansible_host": conn["host"],
            "ansible_port": conn["port"],
            "ansible_user": conn["user"],
            "ansible_ssh_private_key_file": conn["key_path"],
            "ansible_ssh_common_args": known,
            "service_uid": 1000,
            **values,
        }
    return {"all": {"hosts": hosts}}


def playbook() -> list[dict[str, Any]]:
    return [{"hosts": "all", "gather_facts": False, "become": True, "tasks": TASKS}]


def ansible_playbook() -> Path:
    """ansible-playbook from its own cached virtualenv, installed once from PyPI."""
    venv = cache_root() / f"bench-ansible-core-{ANSIBLE_CORE}"
    binary = venv / "bin" / "ansible-playbook"
    if not binary.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        pip = [str(venv / "bin" / "pip"), "install", "--quiet", f"ansible-core=={ANSIBLE_CORE}"]
        subprocess.run(pip, check=True)
    return binary


def write(scratch: Path, export: dict[str, Any]) -> tuple[Path, Path, int]:
    """The inventory and playbook under `scratch`; how many nodes they cover."""
    nodes = host_vars(export)
    hosts, play = scratch / "inventory.yml", scratch / "check.yml"
    hosts.write_text(yaml.dump(inventory(nodes), Dumper=Dumper))
    play.write_text(yaml.safe_dump(playbook(), sort_keys=False))
    return hosts, play, len(nodes)


def check(scratch: Path, export: dict[str, Any]) -> float:
    """One `ansible-playbook --check` over every node at once, timed; a failed task stops it."""
    hosts, play, forks = write(scratch, export)
    env = {**os.environ, "ANSIBLE_HOST_KEY_CHECKING": "True", "ANSIBLE_NOCOLOR": "1"}
    command = [str(ansible_playbook()), "-i", str(hosts), "--check", "-f", str(forks), str(play)]
    started = time.monotonic()
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    seconds = time.monotonic() - started
    if done.returncode != 0:
        sys.exit(f"ansible-playbook --check failed:\n{done.stdout[-4000:]}\n{done.stderr[-2000:]}")
    return seconds


def count_items(export: dict[str, Any]) -> int:
    """How many items the playbook checks on all nodes together."""
    nodes = host_vars(export)
    kinds = ("files", "sysctls", "system_units", "user_units", "links", "containers", "packages")
    return sum(len(values.get(kind, [])) for values in nodes.values() for kind in kinds)


def main(argv: list[str]) -> int:
    """Write the inventory and playbook for an exported state (a file) into a directory."""
    export = json.loads(Path(argv[0]).read_text())
    hosts, play, nodes = write(Path(argv[1]), export)
    print(f"{hosts}, {play}: {nodes} nodes, {count_items(export)} items")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

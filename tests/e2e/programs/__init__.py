"""Small Pulumi programs for the e2e tests and benchmarks, and a throwaway project around one."""

from __future__ import annotations

import json
import os
from pathlib import Path

import yaml

from sparkrack.sim.node_image import LOGIN_USER
from tests.e2e.conftest import REPO, PulumiProject, project_plugins

PROGRAMS = REPO / "tests" / "e2e" / "programs"


def program_project(root: Path, program: str, stack: str, config: dict[str, str]) -> PulumiProject:
    """A project dir running programs/<program>, with its own state, Pulumi home and stack."""
    root.mkdir(parents=True)
    manifest = {
        "name": f"sparkrack-{program}",
        "runtime": "python",
        "main": "program/",
        "plugins": project_plugins(),
    }
    (root / "Pulumi.yaml").write_text(yaml.safe_dump(manifest))
    (root / "program").symlink_to(PROGRAMS / program)
    (root / "state").mkdir()
    env = dict(os.environ)
    env.update(
        PULUMI_BACKEND_URL=f"file://{root / 'state'}",
        PULUMI_HOME=str(root / "pulumi-home"),
        PULUMI_CONFIG_PASSPHRASE="sparkrack-e2e",
        PULUMI_SKIP_UPDATE_CHECK="true",
        PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION="true",
        PULUMI_DISABLE_REGISTRY_RESOLVE="true",
        # The language host takes python from PATH: the project's virtualenv must come first.
        PATH=f"{REPO / '.venv' / 'bin'}{os.pathsep}{env['PATH']}",
    )
    project = PulumiProject(root=root, env=env)
    project.run("stack", "init", stack)
    for key, value in config.items():
        project.run("config", "set", "--stack", stack, key, value)
    return project


# The resources program's service user: absent until its `up` creates it, as on a real rack.
RESOURCES_SERVICE_USER = "sparkrack-svc"
RESOURCES_FENCE_PORT = 52999  # programs/resources fences it: answered on each node's address only


def resources_config(
    nodes: list[tuple[str, str]], key_path: str, known_hosts: str
) -> dict[str, str]:
    """Config for programs/resources: the nodes as (name, address) and the SSH settings."""
    return {
        "e2e:nodes": json.dumps([{"name": name, "address": address} for name, address in nodes]),
        "e2e:user": LOGIN_USER,
        "e2e:keyPath": key_path,
        "e2e:knownHosts": known_hosts,
        "e2e:fencePort": str(RESOURCES_FENCE_PORT),
        "e2e:serviceUser": RESOURCES_SERVICE_USER,
    }

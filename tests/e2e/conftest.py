"""A throwaway copy of the project for the real Pulumi engine: its own state, stacks and home.

The engine is the one `scripts/dev` put on PATH. A missing engine fails these tests: they exist to
prove the real CLI and language host run this program, so they never skip.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
SIM_PASSPHRASE = "sparkrack-sim"
# The sim stacks' sparkrack:apiKey (a secret there, under SIM_PASSPHRASE; as public as it).
SIM_API_KEY = "sparkrack-sim-api-key"
SIM_AUTH = {"Authorization": f"Bearer {SIM_API_KEY}"}
# The CLI of the virtualenv running the tests (which need not be on PATH).
SPARKRACK = str(Path(sys.executable).with_name("sparkrack"))


@dataclass(frozen=True)
class PulumiProject:
    root: Path
    env: dict[str, str]

    def run(
        self,
        *args: str,
        check: bool = True,
        extra_env: dict[str, str] | None = None,
        timeout: float = 600,
    ) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            ["pulumi", *args, "--non-interactive"],
            cwd=self.root,
            env={**self.env, **(extra_env or {})},
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and done.returncode != 0:
            pytest.fail(
                f"pulumi {' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
            )
        return done

    def start(self, *args: str, stdout: IO[str]) -> subprocess.Popen[str]:
        """The engine started and left running: the caller signals it (by this PID) or waits."""
        return subprocess.Popen(
            ["pulumi", *args, "--non-interactive"],
            cwd=self.root,
            env=self.env,
            stdout=stdout,
            stderr=subprocess.STDOUT,
            text=True,
        )

    def preview_events(self, stack: str) -> list[dict[str, Any]]:
        """The engine's own event stream for a preview (what Automation API reads)."""
        streaming = {"PULUMI_ENABLE_STREAMING_JSON_PREVIEW": "true"}
        done = self.run("preview", "--stack", stack, "--json", extra_env=streaming)
        return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]

    def write_stack(self, stack: str, cluster: Any) -> None:
        config = {"config": {"sparkrack:cluster": cluster}}
        (self.root / "stacks" / f"Pulumi.{stack}.yaml").write_text(yaml.safe_dump(config))

    def edit_cluster(self, stack: str, edit: Callable[[Any], object]) -> None:
        """The stack's `sparkrack:cluster` changed in place; its other settings (the secrets'
        salt, encrypted values) kept."""
        path = self.root / "stacks" / f"Pulumi.{stack}.yaml"
        config = yaml.safe_load(path.read_text())
        edit(config["config"]["sparkrack:cluster"])
        path.write_text(yaml.safe_dump(config))


def shipped_cluster(stack: str) -> Any:
    config = yaml.safe_load((REPO / "stacks" / f"Pulumi.{stack}.yaml").read_text())["config"]
    return config["sparkrack:cluster"]


@pytest.fixture(scope="session")
def engine() -> str:
    found = shutil.which("pulumi")
    if found is None:
        pytest.fail("no pulumi on PATH: run the tests through `scripts/dev test`")
    return found


def project_plugins() -> dict[str, Any]:
    """Pulumi.yaml's `plugins` (sparkrack's provider host) with absolute paths, for a project
    elsewhere that runs the repository's resources."""
    plugins: dict[str, Any] = yaml.safe_load((REPO / "Pulumi.yaml").read_text())["plugins"]
    for plugin in plugins["providers"]:
        plugin["path"] = str(REPO / plugin["path"])
    return plugins


def make_project(base: Path, program: Path = REPO / "infra") -> PulumiProject:
    """A project under `base` with the repository's manifest and shipped stacks (a test adds its
    own with `write_stack`) and its own file state, running `program`: the repository's, or one
    under tests/e2e/programs that reads the same stack config. The Pulumi home is the user's,
    where the command plugin is installed."""
    root = base / "project"
    root.mkdir()
    manifest = yaml.safe_load((REPO / "Pulumi.yaml").read_text())
    manifest["runtime"]["options"]["virtualenv"] = str(REPO / ".venv")
    manifest["plugins"] = project_plugins()
    (root / "Pulumi.yaml").write_text(yaml.safe_dump(manifest))
    (root / "infra").symlink_to(program)
    shutil.copytree(REPO / "stacks", root / "stacks")
    state = base / "state"
    state.mkdir()
    env = dict(os.environ)
    env.update(
        PULUMI_BACKEND_URL=f"file://{state}",
        PULUMI_CONFIG_PASSPHRASE=SIM_PASSPHRASE,
        PULUMI_SKIP_UPDATE_CHECK="true",
        PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION="true",
        PULUMI_DISABLE_REGISTRY_RESOLVE="true",
    )
    return PulumiProject(root=root, env=env)


@pytest.fixture(scope="module")
def project(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, engine: str
) -> PulumiProject:
    """One project per test module: its tests share the state, so each uses its own stacks.
    It runs the repository's program, or the module's `PROGRAM` when it names another."""
    program = getattr(request.module, "PROGRAM", REPO / "infra")
    return make_project(tmp_path_factory.mktemp("pulumi"), program)

"""Run infra/__main__.py under Pulumi's mocks, as the engine would, and record what it registers."""

from __future__ import annotations

import json
import runpy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi
import yaml
from pulumi.runtime import settings as pulumi_settings
from pulumi.runtime.stack import wait_for_rpcs
from pulumi.runtime.sync_await import _sync_await

from tests.unit.support import named_model

REPO = Path(__file__).resolve().parents[2]
PROGRAM = REPO / "infra" / "__main__.py"


@dataclass
class RecordingMocks(pulumi.runtime.Mocks):
    """Mocks that echo inputs back as outputs and keep every registration for assertions."""

    resources: list[pulumi.runtime.MockResourceArgs] = field(default_factory=list)

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        self.resources.append(args)
        return f"{args.name}-id", dict(args.inputs)

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[str, Any], list[Any]]:
        return {}, []


@dataclass
class ProgramRun:
    mocks: RecordingMocks
    outputs: dict[str, Any]


def stack_cluster(stack: str) -> Any:
    """The raw `sparkrack:cluster` value of a shipped stack, as the engine hands it over."""
    config = yaml.safe_load((REPO / "stacks" / f"Pulumi.{stack}.yaml").read_text())["config"]
    return config["sparkrack:cluster"]


def deployable_cluster(stack: str) -> Any:
    """A shipped stack as a real rack can deploy it: a real stack's model named (made up)."""
    if stack.startswith("sim-"):
        return stack_cluster(stack)
    return named_model(stack)


def run_program(
    stack: str,
    cluster: Any,
    mocks: RecordingMocks | None = None,
    config: dict[str, str] | None = None,
    secret_keys: list[str] | None = None,
    program: Path = PROGRAM,
) -> ProgramRun:
    """The program (the real one unless told) once, with `config` beside the cluster
    (`secret_keys` of it secret)."""
    mocks = mocks or RecordingMocks()
    pulumi_settings.set_root_resource(None)  # type: ignore[arg-type]  # a fresh Stack per run
    values = {"sparkrack:cluster": json.dumps(cluster), **(config or {})}
    pulumi.runtime.set_all_config(values, secret_keys or [])
    pulumi.runtime.set_mocks(mocks, project="sparkrack", stack=stack, preview=True)
    runpy.run_path(str(program), run_name="__main__")
    # Registrations are asynchronous: wait for them, as the engine's language host does.
    _sync_await(wait_for_rpcs())
    root = pulumi_settings.get_root_resource()
    outputs = dict(getattr(root, "outputs", {}))
    return ProgramRun(mocks=mocks, outputs=outputs)

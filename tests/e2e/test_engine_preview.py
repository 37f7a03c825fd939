"""The real Pulumi CLI and Python language host run sparkrack's program on the shipped stacks."""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from sparkrack.config.load import load_stack_file
from sparkrack.plan import make_plan
from tests.unit.support import named_model

from .conftest import REPO, PulumiProject, shipped_cluster
from .programs import program_project
from .programs.parallel.gate import PARTIES

pytestmark = pytest.mark.e2e


def stack_outputs(events: list[dict[str, Any]]) -> dict[str, Any]:
    """The stack's outputs as the engine last reported them."""
    reported = [
        e["resOutputsEvent"]["metadata"]["new"]
        for e in events
        if "resOutputsEvent" in e
        and e["resOutputsEvent"]["metadata"]["type"] == "pulumi:pulumi:Stack"
    ]
    assert reported, "the engine reported no outputs for the stack"
    outputs: dict[str, Any] = reported[-1]["outputs"]
    return outputs


def summary(events: list[dict[str, Any]]) -> dict[str, Any]:
    summaries: list[dict[str, Any]] = [e["summaryEvent"] for e in events if "summaryEvent" in e]
    assert len(summaries) == 1, "the engine reported no summary"
    return summaries[0]


def test_engine_is_the_pinned_version(project: PulumiProject) -> None:
    pinned = (REPO / "tools" / "pulumi-engine" / "go.mod").read_text()
    version = project.run("version").stdout.strip()
    assert f"github.com/pulumi/pulumi/pkg/v3 {version}" in pinned


@pytest.mark.parametrize("stack", ["sim-2", "gb10-16"])
def test_preview_reports_the_plan(project: PulumiProject, stack: str) -> None:
    if not stack.startswith("sim-"):  # a real stack names its model's repository and commit
        project.write_stack(stack, named_model(stack))
    project.run("stack", "init", stack)

    events = project.preview_events(stack)

    expected = make_plan(load_stack_file(stack, project.root / "stacks"))
    outputs = stack_outputs(events)
    assert outputs["plan_digest"] == expected.digest()
    assert outputs["nodes"] == [node.name for node in expected.nodes]
    assert summary(events)["isPreview"] is True
    assert summary(events)["result"] == "succeeded"


def test_preview_refuses_a_shipped_real_stack_until_its_model_is_named(
    project: PulumiProject,
) -> None:
    project.write_stack("gb10-16-shipped", shipped_cluster("gb10-16"))
    project.run("stack", "init", "gb10-16-shipped")

    refused = project.run("preview", "--stack", "gb10-16-shipped", check=False)

    output = refused.stdout + refused.stderr
    assert refused.returncode != 0
    named = [line for line in output.splitlines() if "names no Hugging Face repository" in line]
    # One line (Pulumi may print a diagnostic twice: inline and in its summary), naming both.
    assert {line[line.index("stack ") :] for line in named} == {
        "stack gb10-16-shipped: model.hf_repo, model.revision: kimi-k3 names no Hugging Face "
        "repository (the catalogue knows none) to load its weights from: `sparkrack model pin "
        "--stack gb10-16-shipped --repo ORG/NAME` writes it and its current commit"
    }
    assert "Traceback" not in output, output


def test_preview_refuses_a_bad_stack_with_a_clear_message(project: PulumiProject) -> None:
    cluster = copy.deepcopy(shipped_cluster("sim-2"))
    cluster["serving"].setdefault("env", {})["NCCL_IB_DISABLE"] = "1"
    project.write_stack("sim-bad", cluster)
    project.run("stack", "init", "sim-bad")

    refused = project.run("preview", "--stack", "sim-bad", check=False)

    output = refused.stdout + refused.stderr
    assert refused.returncode != 0
    assert "stack sim-bad" in output
    assert "NCCL_IB_DISABLE" in output
    assert "Traceback" not in output, output


def installed_plugins(project: PulumiProject) -> set[tuple[str, str, str]]:
    listed = json.loads(project.run("plugin", "ls", "--json").stdout) or []
    return {(p["kind"], p["name"], p["version"]) for p in listed}


def test_the_command_plugin_is_installed_and_the_python_host_is_current(
    project: PulumiProject,
) -> None:
    assert ("resource", "command", "1.2.1") in installed_plugins(project)
    about = project.run("about", "--json").stdout
    hosts = [p for p in json.loads(about)["plugins"] if p["name"] == "python"]
    assert hosts, about
    major, minor = (int(part) for part in hosts[0]["version"].lstrip("v").split(".")[:2])
    assert (major, minor) >= (3, 260), hosts  # v3.68 ignored `virtualenv`


def repository_copy(target: Path) -> Path:
    """The repository's files (tracked, and new ones not ignored) as a user's clone has them:
    no virtualenv, no state."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source, copy_to = REPO / name, target / name
        if not source.exists() and not source.is_symlink():
            continue  # deleted in the work tree, not yet in the index
        copy_to.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, copy_to, follow_symlinks=False)
    return target


def test_plain_pulumi_install_then_preview_from_the_repository_root(
    tmp_path: Path, project: PulumiProject
) -> None:
    """No wrapper and no virtualenv on PATH: `pulumi install` makes .venv from
    infra/requirements.txt, and the engine runs the program and its dynamic providers in it."""
    root = repository_copy(tmp_path / "clone")
    (tmp_path / "state").mkdir()
    plain = PulumiProject(
        root=root, env={**project.env, "PULUMI_BACKEND_URL": f"file://{tmp_path}/state"}
    )
    plain.run("install", timeout=900)
    assert (root / ".venv" / "bin" / "sparkrack").exists()
    plain.run("stack", "init", "sim-2")
    events = plain.preview_events("sim-2")
    expected = make_plan(load_stack_file("sim-2", REPO / "stacks"))
    assert stack_outputs(events)["plan_digest"] == expected.digest()
    assert summary(events)["result"] == "succeeded"


def test_preview_of_a_fresh_download_stack_shows_its_plan(project: PulumiProject) -> None:
    """The files a download will fetch are not known before it runs: the preview still plans
    every node's shards, with no traceback."""
    cluster = copy.deepcopy(shipped_cluster("sim-2"))
    cluster["serving"]["weights"] = {"source": "download"}
    project.write_stack("sim-download", cluster)
    project.run("stack", "init", "sim-download")

    done = project.run("preview", "--stack", "sim-download", check=False)

    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert "Traceback" not in output, output
    assert "model-shards" in output


def test_the_provider_host_serves_as_many_operations_as_parallel_allows(tmp_path: Path) -> None:
    """Pulumi's own dynamic-provider host serves 4 operations at once whatever `--parallel` says;
    sparkrack's (Pulumi.yaml `plugins`) serves as many as the engine sends: eight creates meet
    at a barrier of eight in the host, which four threads would break."""
    project = program_project(tmp_path / "parallel", "parallel", "gates", {})
    done = project.run("up", "--stack", "gates", "--yes", "--parallel", str(PARTIES), check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"+ {PARTIES + 1} created" in done.stdout, done.stdout  # and the stack

"""Another stack's nodes, through the real engine and CLI (issue 34, item 6): a stack whose
last `up` recorded claims on the nodes of sim-2 (its state imported, under a passphrase of its
own, with a secret output beside them) makes a preview of a copy of sim-2 fail before any
resource, in one line, and `sparkrack plan` refuse it alike; `takeover` lets it through, and
its preview records its own claims. No simulated node is needed: nothing gets past the plan."""

from __future__ import annotations

import json
import re
import subprocess
from typing import Any

import pytest
import yaml

from sparkrack.config.load import load_stack_file
from sparkrack.plan import make_plan
from sparkrack.plan.claims import plan_claims

from .conftest import SPARKRACK, PulumiProject, shipped_cluster
from .test_engine_preview import stack_outputs, summary

pytestmark = pytest.mark.e2e

HOLDER = "lab-claims"  # the stack whose state records the claims
CLAIMING = "sim-claimed"  # a copy of sim-2 under another name
REFUSED = (
    f"stack {CLAIMING}: nodes[0] (spark-1).address: 198.18.0.11 is claimed by stack {HOLDER}"
    f" (its box-a): an `up` would reconfigure that rack; add {HOLDER} to `takeover` to take the"
    " node over"
)


def record_claims(project: PulumiProject, stack: str, outputs: dict[str, Any]) -> None:
    """The stack's state holding one root Stack with `outputs`, as its last `up` would leave it,
    encrypted under a passphrase of its own."""
    own = {"PULUMI_CONFIG_PASSPHRASE": "another-rack"}
    project.run("stack", "init", stack, extra_env=own)
    state = json.loads(project.run("stack", "export", "--stack", stack, extra_env=own).stdout)
    name = yaml.safe_load((project.root / "Pulumi.yaml").read_text())["name"]
    state["deployment"]["resources"] = [
        {
            "urn": f"urn:pulumi:{stack}::{name}::pulumi:pulumi:Stack::{name}-{stack}",
            "custom": False,
            "type": "pulumi:pulumi:Stack",
            "outputs": outputs,
        }
    ]
    exported = project.root / f"{stack}.state.json"
    exported.write_text(json.dumps(state))
    project.run("stack", "import", "--stack", stack, "--file", str(exported), extra_env=own)


@pytest.fixture(scope="module")
def claimed(project: PulumiProject) -> PulumiProject:
    secret = {"4dabf18193072939515e22adb298388d": "1b47061264138c4ac30d75fd1eb44270"}
    record_claims(
        project,
        HOLDER,
        {
            "claims": {"nodes": [{"name": "box-a", "address": "198.18.0.11"}]},
            "token": {**secret, "plaintext": json.dumps("not for other stacks")},
        },
    )
    project.write_stack(CLAIMING, shipped_cluster("sim-2"))
    project.run("stack", "init", CLAIMING)
    return project


def test_preview_refuses_a_node_another_stack_claims_before_any_resource(
    claimed: PulumiProject,
) -> None:
    done = claimed.run("preview", "--stack", CLAIMING, check=False)
    output = done.stdout + done.stderr
    assert done.returncode != 0, output
    # One line (Pulumi prints a diagnostic inline and again in its summary).
    refusals = {
        line[line.index("stack ") :] for line in output.splitlines() if "is claimed" in line
    }
    assert refusals == {REFUSED}, output
    assert re.search(r"sparkrack:\w+:[A-Z]", output) is None, output  # no resource of ours
    assert "Traceback" not in output, output


def test_plan_refuses_it_alike_in_the_backend_the_environment_names(
    claimed: PulumiProject,
) -> None:
    argv = [SPARKRACK, "plan", "--stack", CLAIMING, "--stacks-dir", str(claimed.root / "stacks")]
    done = subprocess.run(argv, env=claimed.env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.splitlines() == [f"sparkrack: {REFUSED}"]


def test_takeover_previews_and_records_its_own_claims(claimed: PulumiProject) -> None:
    claimed.edit_cluster(CLAIMING, lambda cluster: cluster.update(takeover=[HOLDER]))
    events = claimed.preview_events(CLAIMING)
    assert summary(events)["result"] == "succeeded"
    plan = make_plan(load_stack_file(CLAIMING, claimed.root / "stacks"))
    assert stack_outputs(events)["claims"] == plan_claims(plan).model_dump(mode="json")

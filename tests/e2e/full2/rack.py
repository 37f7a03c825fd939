"""What the package's modules share: the rack's stack, its wall times, and the looks at it."""

from __future__ import annotations

import json
import shlex
import subprocess
from typing import Any

from sparkrack.plan import Plan
from sparkrack.text.addresses import http_url
from tests.e2e.conftest import PulumiProject
from tests.e2e.sim_fixtures import planned_changes, sparkrack_verify, ssh
from tests.e2e.sim_fixtures import verify_report as sparkrack_verify_report

STACK = "e2e-full2"
PREFIX = "198.18.3"
TIMES: dict[str, object] = {}
STREAMING = {"PULUMI_ENABLE_STREAMING_JSON_PREVIEW": "true"}

# From another node or a client: does address:port answer, or reset as a port nobody listens on
# would? A connect that neither completes nor is reset within the timeout (EAGAIN) is asked
# again, twice: under a loaded machine a SYN can wait out the first one; a fence that drops
# instead of resetting stays silent every time, and reads "silent".
KNOCK = """
import errno, socket, sys
for attempt in range(3):
    s = socket.socket()
    s.settimeout(5)
    code = s.connect_ex((sys.argv[1], int(sys.argv[2])))
    s.close()
    if code != errno.EAGAIN:
        break
named = {0: "answers", errno.ECONNREFUSED: "refused", errno.EAGAIN: "silent"}
print(named.get(code, errno.errorcode.get(code, code)))
"""


def changes(project: PulumiProject) -> dict[str, tuple[str, list[str]]]:
    """What a refreshing preview would change: resource name -> (operation, properties)."""
    args = ("preview", "--stack", STACK, "--refresh", "--json")
    return planned_changes(project.run(*args, extra_env=STREAMING).stdout)


def verify_table(project: PulumiProject) -> subprocess.CompletedProcess[str]:
    """`sparkrack verify`'s table for the rack's stack."""
    return sparkrack_verify(project.env, STACK, project.root / "stacks")


def verify_report(project: PulumiProject) -> dict[str, Any]:
    """`sparkrack verify --json`'s report for the rack's stack, with its exit status."""
    return sparkrack_verify_report(project.env, STACK, project.root / "stacks")


def prometheus(plan: Plan, path: str, **query: str) -> Any:
    """Prometheus's API on the head, from the head (on its management address, the only one)."""
    args = " ".join(f"--data-urlencode {shlex.quote(f'{k}={v}')}" for k, v in query.items())
    head = plan.node(plan.monitoring.prometheus_node)
    url = http_url(head.address, plan.monitoring.prometheus_port, f"/api/v1/{path}")
    out = ssh(STACK, plan.monitoring.prometheus_node, f"curl -sf -G {args} {url}", check=False)
    return json.loads(out)["data"] if out else None

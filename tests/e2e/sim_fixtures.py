"""The simulated racks for the e2e tests, and SSH to them with the cluster's own settings.

The racks are read from the shipped stacks (sim-2, sim-16) through the spec and the plan, then
given their own stack name and /24, so a developer's running `sim-2` is never touched (Podman
would also refuse the same subnet twice).
"""

from __future__ import annotations

import dataclasses
import json
import shlex
import shutil
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sparkrack.plan import Plan
from sparkrack.resources.users import id_range, memlock_dropin
from sparkrack.sim import cluster
from sparkrack.sim.keys import known_hosts_path, login_key, ssh_command
from sparkrack.sim.monitoring_images import ensure_monitoring_images
from sparkrack.sim.stack import topology_for_stack
from sparkrack.sim.standin.image import ensure_standin_image
from sparkrack.sim.topology import SimTopology
from sparkrack.stackspec.roles import ServiceUserSpec
from sparkrack.text.addresses import http_url
from sparkrack.text.commands import as_user

from .conftest import SIM_API_KEY, SPARKRACK, shipped_cluster

# The shipped stacks' service user (the spec's default): `up` creates it; tests log in as the
# owner (the stack's ssh.user) and look at its containers, units and files through sudo.
SERVICE_USER = ServiceUserSpec().name
SERVICE_HOME = ServiceUserSpec().home


def as_service(command: str) -> str:
    """`command` run by the service user in its home: its Podman, its user units, its `~`."""
    return as_user(SERVICE_USER, command)


def memlock_dropin_of(user: str) -> str:
    """The path of `user`'s manager memlock drop-in, as a shell word that finds its uid."""
    return memlock_dropin(0).replace("user@0.", f"user@$(id -u {shlex.quote(user)}).")


def service_user_by_hand(plan: Plan) -> list[str]:
    """Root's commands that make the base role's service user as `up` makes it (it is not
    there before): the account, its subordinate ids, its manager's memlock drop-in, linger."""
    spec = plan.roles.base.service_user
    user = shlex.quote(spec.name)
    ranges = " ".join(
        [f"--add-subuids {id_range(span)}" for span in spec.subuids]
        + [f"--add-subgids {id_range(span)}" for span in spec.subgids]
    )
    dropin = memlock_dropin_of(spec.name)
    limit = f"[Service]\nLimitMEMLOCK={plan.nodes[0].memlock_limit.systemd()}\n"
    return [
        f"{{ id {user} >/dev/null 2>&1 || useradd --create-home {user}; }}",
        f"grep -qx {user}:{shlex.quote(spec.subuids[0])} /etc/subuid || usermod {ranges} {user}",
        f'mkdir -p "$(dirname {dropin})" && printf {shlex.quote(limit)} > "{dropin}"',
        "systemctl daemon-reload",
        f"loginctl enable-linger {user}",
    ]


HOST_TOOLS = ("podman", "runc", "debootstrap", "ip", "nsenter", "ssh", "ssh-keygen", "dnsmasq")


def shipped_rack(stack: str, test_stack: str, mgmt_prefix: str) -> SimTopology:
    """The shipped stack's rack, renamed and moved to `mgmt_prefix`.0/24."""
    topology = topology_for_stack(stack)
    moved = tuple(
        dataclasses.replace(node, mgmt_address=f"{mgmt_prefix}.{node.mgmt_address.split('.')[3]}")
        for node in topology.nodes
    )
    return dataclasses.replace(
        topology, stack=test_stack, nodes=moved, mgmt_subnet=f"{mgmt_prefix}.0/24"
    )


def private_cluster(stack: str, test_stack: str, mgmt_prefix: str) -> Any:
    """The shipped stack's cluster config for `shipped_rack`'s copy: its /24, SSH key and
    pinned host keys."""
    config = json.loads(json.dumps(shipped_cluster(stack)))
    for node in config["nodes"]:
        node["address"] = f"{mgmt_prefix}.{node['address'].split('.')[3]}"
    config["ssh"]["key_path"] = str(login_key(test_stack))
    config["ssh"]["known_hosts"] = str(known_hosts_path(test_stack))
    return config


def ssh(stack: str, node: str, command: str, check: bool = True) -> str:
    """stdout of `command` on the node over real SSH (pinned host keys, the cluster's key)."""
    done = subprocess.run(
        ssh_command(stack, node, command), capture_output=True, text=True, timeout=120
    )
    if check and done.returncode != 0:
        pytest.fail(
            f"stack {stack}, node {node}: `{command}` exited {done.returncode}:\n"
            f"{done.stdout}\n{done.stderr}"
        )
    return done.stdout.strip()


def targets_up_by_job(stack: str, plan: Plan) -> Counter[str]:
    """Prometheus's healthy targets by job, asked on its node (none while it does not answer)."""
    head = plan.node(plan.monitoring.prometheus_node)
    url = http_url(head.address, plan.monitoring.prometheus_port, "/api/v1/targets?state=active")
    command = f"curl -sf --max-time 10 {shlex.quote(url)}"
    out = ssh(stack, plan.monitoring.prometheus_node, command, check=False)
    active = json.loads(out)["data"]["activeTargets"] if out else []
    return Counter(t["labels"]["job"] for t in active if t["health"] == "up")


def poll(read: Callable[[], str], done: Callable[[str], bool], timeout: float = 120) -> str:
    """Read until `done` holds or the time is up; returns the last reading either way."""
    deadline = time.monotonic() + timeout
    value = read()
    while not done(value) and time.monotonic() < deadline:
        time.sleep(0.5)
        value = read()
    return value


def require_host_tools() -> None:
    missing = [tool for tool in HOST_TOOLS if shutil.which(tool) is None]
    if missing:
        pytest.fail(f"the simulated cluster needs {', '.join(missing)} on this host (as root)")


def fresh(topology: SimTopology) -> Iterator[SimTopology]:
    """The rack made from nothing, healthy, and removed after (a failed up included). What an
    interrupted run left under the stack's name (nodes with its deployment on them) is removed
    first: every test here starts from fresh nodes."""
    require_host_tools()
    cluster.down(topology, lambda line: None)
    try:
        status = cluster.up(topology, print)
        assert status.healthy, status
        yield topology
    finally:
        cluster.down(topology, print)


@pytest.fixture(scope="module")
def sim2() -> Iterator[SimTopology]:
    """sim-2's topology, up once for the module and removed at its end."""
    yield from fresh(shipped_rack("sim-2", "e2e-2", "198.18.2"))


def planned_changes(preview_json: str) -> dict[str, tuple[str, list[str]]]:
    """resource name -> (operation, changed properties) for every step of a streamed JSON preview
    (PULUMI_ENABLE_STREAMING_JSON_PREVIEW) that is not a no-op."""
    changes = {}
    for line in preview_json.splitlines():
        meta = json.loads(line).get("resourcePreEvent", {}).get("metadata")
        if meta and meta["op"] not in ("same", "refresh", "read"):
            changes[meta["urn"].rsplit("::", 1)[1]] = (meta["op"], sorted(meta.get("diffs") or []))
    return changes


def sparkrack_verify(
    env: dict[str, str] | None, stack: str, stacks_dir: Path, *options: str
) -> subprocess.CompletedProcess[str]:
    """`sparkrack verify` of the Plan a test project's stack deployed (its state, read in the
    project that holds `stacks_dir`)."""
    return run_verify(env, "--stack", stack, "--stacks-dir", str(stacks_dir), *options)


def run_verify(env: dict[str, str] | None, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [SPARKRACK, "verify", *args], env=env, capture_output=True, text=True, timeout=600
    )


def verify_report(
    env: dict[str, str] | None, stack: str, stacks_dir: Path, *options: str
) -> dict[str, Any]:
    """`sparkrack verify --json`'s report, with its exit status."""
    return report_of(sparkrack_verify(env, stack, stacks_dir, "--json", *options))


def report_of(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    """A `sparkrack verify --json` run's report, with its exit status."""
    report: dict[str, Any] = json.loads(done.stdout)
    report["exit_status"] = done.returncode
    return report


def rack(shipped: str, stack: str, prefix: str, netplan_every: int = 0) -> Iterator[SimTopology]:
    """The module's private copy of a shipped rack, made fresh (see `fresh`); with
    `netplan_every` n, every n-th node runs netplan (as Ubuntu and DGX OS do), the rest networkd."""
    topology = shipped_rack(shipped, stack, prefix)
    if netplan_every:
        nodes = tuple(
            dataclasses.replace(node, network_stack="netplan") if i % netplan_every == 0 else node
            for i, node in enumerate(topology.nodes, start=1)
        )
        topology = dataclasses.replace(topology, nodes=nodes)
    yield from fresh(topology)


def engine_rack(
    shipped: str, stack: str, mgmt_prefix: str, netplan_every: int = 0
) -> Iterator[SimTopology]:
    """`rack`, the engine stand-in and the monitoring images built here first (the sim stacks
    load them from this machine)."""
    require_host_tools()
    ensure_standin_image(print)
    ensure_monitoring_images(print)
    yield from rack(shipped, stack, mgmt_prefix, netplan_every)


def first_up(
    project: Any,
    shipped: str,
    stack: str,
    mgmt_prefix: str,
    timeout: float,
    serving: dict[str, Any] | None = None,
    verify: bool = False,
) -> float:
    """The private stack (with `serving` merged into its serving section) written and
    initialized in `project`, then `pulumi up` from fresh nodes; returns its wall time. The
    verification that ends a real `up` runs only with `verify` (else the tests run it apart,
    against the project's own stack files)."""
    cluster = private_cluster(shipped, stack, mgmt_prefix)
    cluster["serving"] |= serving or {}
    project.write_stack(stack, cluster)
    project.run("stack", "init", stack)
    # the API's key, a secret as the shipped sim stacks set it: every e2e client sends it
    project.run("config", "set", "--secret", "--stack", stack, "sparkrack:apiKey", SIM_API_KEY)
    verify_on_up = "true" if verify else "false"
    project.run("config", "set", "--stack", stack, "sparkrack:verifyOnUp", verify_on_up)
    log = project.root / f"up-{stack}.log"
    started = time.monotonic()
    with log.open("w") as out:
        code = project.start("up", "--stack", stack, "--yes", "--skip-preview", stdout=out)
        status = code.wait(timeout=timeout)
    assert status == 0, log.read_text()[-5000:]
    return round(time.monotonic() - started, 1)

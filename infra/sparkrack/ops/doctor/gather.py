"""`sparkrack doctor`'s readings, over the pooled SSH transport, every node at once.

Read-only. The one thing that sends anything is the cable probe: a few broadcast frames of an
experimental EtherType per fabric port, a port that was down raised only for the probe. A node
that cannot be reached is recorded and never stops the others (fabric's GroupResult).
"""

from __future__ import annotations

import secrets
import shlex
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

from sparkrack.asking import gather
from sparkrack.facts.links import all_links
from sparkrack.facts.nccl_env import image_env, nccl_env_hits
from sparkrack.facts.os_release import os_release
from sparkrack.facts.ping import PingResult, jumbo_ping_command, parse_ping
from sparkrack.facts.rdma import rdma_devices
from sparkrack.facts.users import account, user_manager_memlock
from sparkrack.ops.doctor.judge import ping_target
from sparkrack.ops.doctor.readings import NodeReading, PortProbe, RackReading, parse_probe
from sparkrack.plan import NodePlan, Plan
from sparkrack.transport import ssh
from sparkrack.transport.target import SshError, Target

# ends early when every port has carrier.
PROBE_WAIT_S = 6.0
PROBE_LISTEN_S = 2.0
PROBE_SCRIPT = Path(__file__).with_name("cable_probe_node.py")
FAN_OUT = 16

T = TypeVar("T")
K = TypeVar("K")


def fan_out(keys: Sequence[K], work: Callable[[K], T]) -> tuple[dict[K, T], dict[K, str]]:
    """`work` on every key at once: (results, errors) by key; one failure stops no other."""

    def one(key: K) -> T | SshError:
        try:
            return work(key)
        except SshError as error:
            return error

    with ThreadPoolExecutor(max_workers=FAN_OUT) as pool:
        outcomes = dict(zip(keys, pool.map(one, keys), strict=True))
    results = {k: v for k, v in outcomes.items() if not isinstance(v, SshError)}
    errors = {k: str(v) for k, v in outcomes.items() if isinstance(v, SshError)}
    return results, errors


def read_node(target: Target, os_name: str, image: str, service_user: str) -> NodeReading:
    """What the doctor judges on one node. The memlock, the env files and the image are the
    service user's (its rootless Podman runs the engine), not the SSH login's; before the first
    `up` has made that user there is none of it to read (memlock "", no image)."""
    user = gather(target, account(service_user))
    env_hits, memlock, env = nccl_env_hits(), "", None
    if user is not None:
        env_hits = env_hits.as_user(service_user)
        memlock = gather(target, user_manager_memlock(user.uid))
        env = gather(target, image_env(image).as_user(service_user))
    links = gather(target, all_links())
    rdma = gather(target, rdma_devices())
    hits = gather(target, env_hits)
    return NodeReading(os_name, links, rdma, memlock, hits, env)


def probe_node(target: Target, node: NodePlan, nonce: str) -> dict[str, PortProbe]:
    netdevs = [nic.netdev for nic in node.nics]
    args = [nonce, node.name, f"{PROBE_WAIT_S:g}", f"{PROBE_LISTEN_S:g}", *netdevs]
    # The script travels as an argument: ssh.run feeds stdin a byte per 10 ms (invoke reads a
    # StringIO one byte at a time), which made a 5 KB script take a minute.
    command = shlex.join(["python3", "-c", PROBE_SCRIPT.read_text(), *args])
    result = ssh.run(target, command, sudo=True, timeout=60)
    return parse_probe(result.stdout)


def ping(target: Target, command: str) -> PingResult:
    result = ssh.run(target, command, check=False, timeout=30)
    return parse_ping(result.stdout, result.exit_status)


def gather_rack(plan: Plan) -> RackReading:
    targets = {node.name: Target.for_node(node) for node in plan.nodes}
    names = [node.name for node in plan.nodes]
    service_user = plan.roles.base.service_user.name
    # The first read also proves SSH: a node that fails it is unreachable, not misread.
    systems, unreachable = fan_out(names, lambda n: gather(targets[n], os_release()))
    nodes, read_errors = fan_out(
        list(systems), lambda n: read_node(targets[n], systems[n], plan.serving.image, service_user)
    )
    reachable = [node for node in plan.nodes if node.name in nodes]
    nonce = secrets.token_hex(6)  # frames of an earlier or concurrent run are not counted
    probes, probe_errors = fan_out(
        [n.name for n in reachable],
        lambda n: probe_node(targets[n], plan.node(n), nonce),
    )
    pings = run_pings(plan, RackReading(nodes=nodes), targets)
    return RackReading(nodes, unreachable, read_errors, probes, probe_errors, pings)


def run_pings(
    plan: Plan, reading: RackReading, targets: dict[str, Target]
) -> dict[int, PingResult]:
    commands = {}
    for index, check in enumerate(plan.jumbo_pings):
        address = ping_target(check, reading)
        if address is not None:
            commands[index] = (
                targets[check.from_node],
                jumbo_ping_command(check.from_netdev, address, check.payload_bytes),
            )
    results, errors = fan_out(list(commands), lambda i: ping(*commands[i]))
    return {**results, **{i: PingResult(False, error) for i, error in errors.items()}}

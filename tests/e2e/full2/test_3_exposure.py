"""Exposure (issue 34), on the package's rack after the other modules: the node fence admits the
API to the stack's client networks only and Ray to the rack's nodes only, and the API asks for
its key (set by `first_up` as the shipped sim stacks set one, a Pulumi secret).

The rack's management network is 198.18.3.0/24: this machine is .1, the nodes .11 and .12. The
stack is narrowed to `client_networks: [198.18.3.0/27]` and one `up` reloads the fences; then
one-shot clients (a container of the nodes' image on the management network, nothing else in
it) ask from .20, a declared client, and .200, a client outside every declared network. Last,
the key is rotated and one `up` makes the new one the only one the API takes. The module puts
the stack back as it found it (one more `up`)."""

from __future__ import annotations

import shlex
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from sparkrack.config.load import load_stack_file
from sparkrack.plan import Plan, make_plan
from sparkrack.plan.listeners import RAY_FIXED_PORTS
from sparkrack.plan.parallel import RAY_PORT
from sparkrack.sim import nodes
from sparkrack.sim.standin.image import podman_ulimit_args
from sparkrack.text.addresses import http_url
from tests.e2e.conftest import SIM_API_KEY, PulumiProject
from tests.e2e.sim_fixtures import as_service, ssh

from .rack import KNOCK, PREFIX, STACK, verify_table

pytestmark = pytest.mark.e2e

DECLARED = f"{PREFIX}.20"
OUTSIDE = f"{PREFIX}.200"
CLIENT_NETWORKS = [f"{PREFIX}.0/27"]  # this machine, both nodes, DECLARED; not OUTSIDE
UP_TIMEOUT_S = 900
ROTATED_KEY = "sparkrack-sim-api-key-rotated"  # as public as the shipped one

# A client's GET: the HTTP status, or `unreachable` (refused, reset, timed out).
ASK = """
import sys, urllib.error, urllib.request
key = sys.argv[2:]
headers = {"Authorization": "Bearer " + key[0]} if key else {}
request = urllib.request.Request(sys.argv[1], headers=headers)
try:
    print(urllib.request.urlopen(request, timeout=10).status)
except urllib.error.HTTPError as error:
    print(error.code)
except OSError:
    print("unreachable")
"""


def up(deploy: PulumiProject) -> None:
    deploy.run("up", "--stack", STACK, "--yes", "--skip-preview", timeout=UP_TIMEOUT_S)


def set_api_key(deploy: PulumiProject, key: str) -> None:
    deploy.run("config", "set", "--secret", "--stack", STACK, "sparkrack:apiKey", key)


def set_client_networks(cluster: Any, networks: list[str] | None) -> None:
    if networks is None:
        cluster.pop("client_networks", None)
    else:
        cluster["client_networks"] = networks


@pytest.fixture(scope="module")
def narrowed(deploy: PulumiProject) -> Iterator[Plan]:
    """The rack with its client networks narrowed to CLIENT_NETWORKS, fences reloaded by `up`."""
    deploy.edit_cluster(STACK, lambda cluster: set_client_networks(cluster, CLIENT_NETWORKS))
    up(deploy)
    try:
        yield make_plan(load_stack_file(STACK, deploy.root / "stacks"))
    finally:  # the shipped key back too (test_a_rotated_key_...): one `up` for both
        deploy.edit_cluster(STACK, lambda cluster: set_client_networks(cluster, None))
        set_api_key(deploy, SIM_API_KEY)
        up(deploy)


def node_image() -> str:
    """The image the rack's nodes run: it has python3, and nothing of sparkrack's."""
    inspect = ["podman", "inspect", "--format", "{{.ImageName}}"]
    done = subprocess.run(
        [*inspect, nodes.container_name(STACK, "spark-1")], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def from_client(address: str, script: str, *args: str) -> str:
    """`script`'s output, run by python3 in a one-shot container at `address` on the rack's
    management network."""
    network = f"{nodes.network_name(STACK)}:ip={address}"
    argv = ["podman", "run", "--rm", "--network", network, "--entrypoint", "python3"]
    # runc sets Podman's default limits, above this machine's hard ones: as the sim's builds do
    argv += [*podman_ulimit_args(), node_image(), "-c", script, *args]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip()


def knock(client: str, address: str, port: int) -> str:
    return from_client(client, KNOCK, address, str(port))


def models_url(plan: Plan) -> str:
    return http_url(plan.serving.address, plan.serving.port, "/v1/models")


def test_the_fences_hold_the_declared_client_networks(narrowed: Plan) -> None:
    head = narrowed.node(narrowed.head_node)
    assert head.fence.clients[0] == CLIENT_NETWORKS[0]
    listed = ssh(STACK, head.name, "sudo nft list table inet sparkrack_ray_fence")
    assert f"ip saddr {{ {CLIENT_NETWORKS[0]}," in listed, listed


def test_a_client_outside_the_declared_networks_reaches_neither_ray_nor_the_api(
    narrowed: Plan,
) -> None:
    head, worker = narrowed.node("spark-1"), narrowed.node("spark-2")
    found = {
        "gcs": knock(OUTSIDE, head.address, RAY_PORT),
        "api": knock(OUTSIDE, head.address, narrowed.serving.port),
        "node manager": knock(OUTSIDE, worker.address, RAY_FIXED_PORTS["--node-manager-port"]),
        "api with the key": from_client(OUTSIDE, ASK, models_url(narrowed), SIM_API_KEY),
    }
    assert found == {
        "gcs": "refused",
        "api": "refused",
        "node manager": "refused",
        "api with the key": "unreachable",
    }


def test_a_declared_client_reaches_the_api_only_with_the_key(narrowed: Plan) -> None:
    url, head = models_url(narrowed), narrowed.node("spark-1")
    found = {
        "without a key": from_client(DECLARED, ASK, url),
        "another key": from_client(DECLARED, ASK, url, "not-the-key"),
        "the key": from_client(DECLARED, ASK, url, SIM_API_KEY),
        "gcs": knock(DECLARED, head.address, RAY_PORT),  # a client is not the rack
    }
    assert found == {
        "without a key": "401",
        "another key": "401",
        "the key": "200",
        "gcs": "refused",
    }


def test_this_machine_a_declared_client_too_reaches_the_api_only_with_the_key(
    narrowed: Plan,
) -> None:
    url = models_url(narrowed)
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(url, timeout=10)
    assert refused.value.code == 401
    keyed = urllib.request.Request(url, headers={"Authorization": f"Bearer {SIM_API_KEY}"})
    with urllib.request.urlopen(keyed, timeout=10) as answer:
        assert answer.status == 200


def test_the_rack_itself_still_reaches_ray_and_the_api(narrowed: Plan) -> None:
    """spark-2 (the rack) reaches the head's GCS; the head's own checks ask the API."""
    head = narrowed.node("spark-1")
    script = f"python3 -c {shlex.quote(KNOCK)} {head.address} {RAY_PORT}"
    assert ssh(STACK, "spark-2", script) == "answers"


def test_verify_checks_the_key_and_the_fence(narrowed: Plan, deploy: PulumiProject) -> None:
    done = verify_table(deploy)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "inference   test_the_api_asks_for_its_key" in done.stdout
    assert "test_the_node_fence_is_the_plans" in done.stdout


def test_the_api_key_lost_on_the_head_fails_verify_and_up_hands_it_over_again(
    narrowed: Plan, deploy: PulumiProject
) -> None:
    """The key's Podman secret gone (as a reboot clears it): the check's keyed ask has no key,
    the API answers 401 and verify says so; one `up` creates the secret again (vLLM still holds
    the key in its env: it is not restarted)."""
    secret = narrowed.serving.api_key_secret
    assert secret is not None
    ssh(STACK, narrowed.head_node, as_service(f"podman secret rm {secret}"))
    failed = verify_table(deploy)
    assert failed.returncode != 0 and "test_the_api_asks_for_its_key" in failed.stdout
    deploy.run("up", "--stack", STACK, "--yes", "--skip-preview", timeout=UP_TIMEOUT_S)
    done = verify_table(deploy)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]


def asked_with(url: str, key: str) -> int:
    """The HTTP status of a GET from this machine (a declared client) with `key`."""
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as error:
        return error.code


def test_a_rotated_key_is_the_only_one_the_api_takes_after_one_up(
    narrowed: Plan, deploy: PulumiProject
) -> None:
    """Day 2: the key rotated in the stack's config. One `up` hands the new value over and
    restarts vLLM, which reads its key only when it starts: from then on the old key is
    refused. The module's teardown sets the shipped key back."""
    set_api_key(deploy, ROTATED_KEY)
    up(deploy)
    url = models_url(narrowed)
    assert {"old": asked_with(url, SIM_API_KEY), "new": asked_with(url, ROTATED_KEY)} == {
        "old": 401,
        "new": 200,
    }
    done = verify_table(deploy)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]

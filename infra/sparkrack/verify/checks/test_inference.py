"""Inference: the Ray cluster complete, the declared model served, NCCL on RoCE over both
HCAs of every node, never on sockets (the seeds' silent 58% loss), and every engine container
seeing its node's GPUs."""

from __future__ import annotations

from typing import Any

import pytest

from sparkrack.facts.gpu import gpus_in
from sparkrack.facts.http import http_status, served_models
from sparkrack.facts.nccl_env import (
    NcclTransport,
    QueuePairMiss,
    latest_nccl_transport,
    nccl_transport,
)
from sparkrack.facts.podman import log_file
from sparkrack.facts.ray import alive_nodes
from sparkrack.plan.engine import HEAD_CONTAINER
from sparkrack.text.addresses import http_url
from sparkrack.verify.checks.readings import read, read_as_service_user
from sparkrack.verify.checks.subjects import Container, Node
from sparkrack.verify.inventory import Inventory

ROLES = ("inference",)


def test_ray_node_count(host: Any, inventory: Inventory, api: Node) -> None:
    container = HEAD_CONTAINER  # where `ray status` runs
    query = read_as_service_user(host, api.user, alive_nodes(container))
    assert query.addresses is not None, f"Ray node query in {container} failed: {query.error}"
    alive = set(query.addresses)
    want = {node.address: node.name for node in inventory.nodes}
    missing = sorted(
        f"{name} ({address})" for address, name in want.items() if address not in alive
    )
    assert not missing, f"Ray has {len(alive)} alive nodes; missing {', '.join(missing)}"
    extra = sorted(alive - set(want))
    assert not extra, f"Ray has nodes outside the Plan: {', '.join(extra)}"


def test_model_served(host: Any, inventory: Inventory, api: Node) -> None:
    serving = inventory.plan.serving
    url = http_url(serving.address, serving.port, "/v1/models")
    # with the API's key when it asks for one: from its Podman secret, the service user's
    served = read_as_service_user(host, api.user, served_models(url, serving.api_key_secret))
    assert served is not None, f"{url} did not answer"
    want = serving.served_model_name
    assert want in served, f"{url} serves {list(served)}, want {want}"


def test_the_api_asks_for_its_key(host: Any, inventory: Inventory, api: Node) -> None:
    """Without the key, 401; with the one the API's Podman secret holds, 200. A stack without
    sparkrack:apiKey has an API anyone it admits may use: nothing to check."""
    serving = inventory.plan.serving
    if serving.api_key_secret is None:
        pytest.skip("the stack sets no sparkrack:apiKey: the API asks for no key")
    url = http_url(serving.address, serving.port, "/v1/models")
    without = read(host, http_status(url))
    assert without == 401, f"{url} without a key answered {without or 'nothing'}, not 401"
    keyed = read_as_service_user(host, api.user, http_status(url, serving.api_key_secret))
    assert keyed == 200, f"{url} with the key of {serving.api_key_secret} answered {keyed}"


def test_nccl_transport(hosts: Any, inventory: Inventory, node: Node) -> None:
    """The engine log holds each rank's NCCL lines, prefixed `host:pid:tid [gpu]`: its file on
    the API's node, which outlives an engine that NCCL stopped."""
    api = inventory.plan.serving.api_node  # vLLM's log there: every rank's lines
    path = inventory.plan.node(api).paths.engine_log
    lines = read_as_service_user(hosts[api], node.user, log_file(path))
    assert lines is not None, f"no engine log {path} on {api} to read the NCCL lines of"
    name, owners = node.node.name, hca_owners(inventory)
    transport = nccl_transport(lines, name)
    if transport.silent:  # the engine (re)starting: say what its last start that got there said
        earlier = latest_nccl_transport(lines, name)
        said = transport_problem(earlier, owners, node.node.rdma_devices) if earlier else None
        before = f"; at the start before, {said}" if said else ""
        raise AssertionError(f"no NCCL line from {name} since the engine's last start{before}")
    problem = transport_problem(transport, owners, node.node.rdma_devices)
    assert problem is None, problem


def transport_problem(
    transport: NcclTransport, owners: dict[str, str], rdma_devices: tuple[str, ...]
) -> str | None:
    """What is wrong with one rank's NCCL network (one that said something of it), None when it
    runs on all its HCAs."""
    if transport.unconnected:
        described = [describe_miss(miss, owners) for miss in transport.unconnected]
        return "NCCL's queue pairs found no path: " + "; ".join(described)
    if transport.sockets:
        return f"NCCL fell back to sockets: {transport.sockets[0]}"
    missing = [hca for hca in rdma_devices if f"{hca}:1" not in transport.roce_ports]
    return f"NCCL uses {transport.using}, missing {missing}" if missing else None


def hca_owners(inventory: Inventory) -> dict[str, str]:
    """A fabric address -> `node netdev` that holds it, from the Plan."""
    return {
        link.address.split("/")[0]: f"{node.name} {link.netdev}"
        for node in inventory.plan.nodes
        for link in node.links
        if link.address
    }


def describe_miss(miss: QueuePairMiss, owners: dict[str, str]) -> str:
    here = owners.get(miss.local, miss.local)
    there = owners.get(miss.remote, miss.remote)
    return (
        f"{here} ({miss.device}, {miss.local}) to {there} ({miss.remote}): {miss.error}; the two "
        "HCAs are not on one cable (or switch rail): see NCCL_IB_HCA in the Plan and the cable map"
    )


def test_container_gpus(host: Any, container: Container) -> None:
    """Inside the running container: the GPUs its CDI device gave it, as nvidia-smi (which the
    spec mounts) lists them."""
    node, name = container.node, container.container.name
    if node.gpu_access.kind == "none":
        pytest.skip(f"hardware {node.hardware} declares gpu_access.kind: none")
    seen = read_as_service_user(host, container.user, gpus_in(name))
    assert not seen.error, f"nvidia-smi -L in {name} failed: {seen.error}"
    assert len(seen.gpus) == node.gpus, (
        f"{name} sees {len(seen.gpus)} GPUs, want {node.gpus} (hardware {node.hardware}): "
        + ("; ".join(seen.gpus) or "none")
    )

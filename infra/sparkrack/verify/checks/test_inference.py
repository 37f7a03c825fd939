"""Inference: the Ray cluster complete, the declared model served, and NCCL on RoCE over both
HCAs of every node, never on sockets (the seeds' silent 58% loss)."""

from __future__ import annotations

import json
from typing import Any

from sparkrack.addresses import http_url
from sparkrack.facts.ray import alive_nodes_command, parse_alive_nodes
from sparkrack.verify.checks.podman_cli import podman
from sparkrack.verify.checks.subjects import Node
from sparkrack.verify.inventory import Inventory

ROLES = ("inference",)


def test_ray_node_count(host: Any, inventory: Inventory, api: Node) -> None:
    container = inventory.inference.ray_container
    query = " ".join(["%s"] * len(alive_nodes_command()))
    result = podman(host, api.node, f"exec %s {query}", container, *alive_nodes_command())
    assert result.rc == 0, f"Ray node query in {container} failed: {result.stderr.strip()[-200:]}"
    alive = set(parse_alive_nodes(result.stdout))
    want = {node.ssh.host: node.name for node in inventory.nodes}
    missing = sorted(
        f"{name} ({address})" for address, name in want.items() if address not in alive
    )
    assert not missing, f"Ray has {len(alive)} alive nodes; missing {', '.join(missing)}"
    extra = sorted(alive - set(want))
    assert not extra, f"Ray has nodes outside the Plan: {', '.join(extra)}"


def test_model_served(host: Any, inventory: Inventory, api: Node) -> None:
    url = http_url(inventory.inference.address, inventory.inference.port, "/v1/models")
    result = host.run("curl -sf --max-time 5 %s", url)
    assert result.rc == 0, f"{url} did not answer (curl exit {result.rc})"
    served = [model["id"] for model in json.loads(result.stdout)["data"]]
    want = inventory.inference.served_model_name
    assert want in served, f"{url} serves {served}, want {want}"


def test_nccl_transport(hosts: Any, inventory: Inventory, node: Node) -> None:
    """The engine log holds each rank's NCCL lines, prefixed `host:pid:tid [gpu]`."""
    api = inventory.node(inventory.inference.api_node)
    logs = podman(hosts[api.name], api, "logs %s", inventory.inference.container)
    mine = [
        line
        for line in (logs.stdout + logs.stderr).splitlines()
        if line.startswith(f"{node.node.name}:")
    ]
    sockets = [line for line in mine if "NET/Socket" in line]
    assert not sockets, f"NCCL fell back to sockets: {sockets[0].strip()}"
    using = [line for line in mine if "NET/IB : Using" in line]
    assert using, f"no `NET/IB : Using` line from {node.node.name} in the engine log"
    missing = [hca for hca in node.node.nccl_hcas if f"{hca}:1/RoCE" not in using[-1]]
    assert not missing, f"NCCL uses {using[-1].split('Using')[-1].strip()}, missing {missing}"

"""Podman: a rootless service user able to lock memory for NCCL, its containers on the host
network with the Plan's env (never NCCL_IB_DISABLE), and one image id across the rack."""

from __future__ import annotations

from typing import Any

from sparkrack.facts.proc import memlock
from sparkrack.verify.checks.podman_cli import inspect_container, podman
from sparkrack.verify.checks.readings import env_list, read
from sparkrack.verify.checks.subjects import Container, Node, needs
from sparkrack.verify.inventory import Inventory

NCCL_PREFIX = "NCCL_"
FORBIDDEN_ENV = "NCCL_IB_DISABLE"  # forced TCP sockets and cost 58% (seed 001)


@needs("base")
def test_service_user_subids(host: Any, node: Node) -> None:
    user = node.node.podman.service_user
    for path in ("/etc/subuid", "/etc/subgid"):
        ranges = [line for line in host.check_output("cat %s", path).splitlines() if line]
        mine = [line for line in ranges if line.split(":")[0] == user]
        assert mine, f"{user} has no range in {path}"
        assert int(mine[0].split(":")[2]) >= 65536, f"{user}'s range in {path} is {mine[0]}"


@needs("base")
def test_service_user_linger(host: Any, node: Node) -> None:
    user = node.node.podman.service_user
    linger = host.run("loginctl show-user --property Linger --value %s", user).stdout.strip()
    assert linger == "yes", f"{user} does not linger ({linger or 'no session'})"


@needs("base")
def test_user_manager_memlock(host: Any, node: Node) -> None:
    user = node.node.podman.service_user
    uid = host.check_output("id -u %s", user)
    pid = host.check_output("systemctl show --property MainPID --value %s", f"user@{uid}.service")
    assert pid not in ("", "0"), f"{user}'s user manager (user@{uid}.service) is not running"
    soft, hard = read(host, memlock(int(pid)))
    limit = node.node.podman.memlock_limit
    want = "unlimited" if limit is None else str(limit)
    assert (soft, hard) == (want, want), (
        f"user@{uid}.service memlock soft {soft}, hard {hard}, want {want}"
    )


@needs("inference")
def test_container_running(host: Any, container: Container) -> None:
    state = inspect_container(host, container.node, container.container.name)["State"]
    assert state["Running"], f"{container.container.name} is {state['Status']}"


@needs("inference")
def test_container_rootless(host: Any, container: Container) -> None:
    rootless = podman(host, container.node, "info --format %s", "{{.Host.Security.Rootless}}")
    user = container.node.podman.service_user
    assert rootless.stdout.strip() == "true", f"{user}'s podman is not rootless"
    inspect_container(host, container.node, container.container.name)


@needs("inference")
def test_container_host_network(host: Any, container: Container) -> None:
    record = inspect_container(host, container.node, container.container.name)
    mode = record["HostConfig"]["NetworkMode"]
    assert mode == container.container.network, f"{container.container.name} network {mode}"


@needs("inference")
def test_container_env(host: Any, container: Container) -> None:
    record = inspect_container(host, container.node, container.container.name)
    live = env_list(record["Config"]["Env"])
    want = container.container.env
    wrong = {k: live.get(k) for k, v in want.items() if live.get(k) != v}
    extra = sorted(k for k in live if k.startswith(NCCL_PREFIX) and k not in want)
    assert not wrong and not extra, (
        f"{container.container.name} env differs from the Plan: "
        + ", ".join(f"{k}={v!r} (want {want[k]!r})" for k, v in wrong.items())
        + (f" not planned: {', '.join(extra)}" if extra else "")
    )


@needs("inference")
def test_nccl_ib_disable_absent(host: Any, container: Container) -> None:
    record = inspect_container(host, container.node, container.container.name)
    live = env_list(record["Config"]["Env"])
    assert FORBIDDEN_ENV not in live, (
        f"{container.container.name} sets {FORBIDDEN_ENV}={live[FORBIDDEN_ENV]}: "
        "NCCL would run on sockets"
    )


def image_id(host: Any, node: Any) -> str:
    result = podman(host, node, "image inspect --format %s %s", "{{.Id}}", node.podman.image)
    assert result.rc == 0, f"no image {node.podman.image} for {node.podman.service_user}"
    return str(result.stdout.strip())


@needs("inference")  # the serving image is shipped to every node by the inference role
def test_image_id(host: Any, hosts: Any, inventory: Inventory, node: Node) -> None:
    mine = image_id(host, node.node)
    head = inventory.node(inventory.head_node)
    theirs = image_id(hosts[head.name], head)
    assert mine == theirs, (
        f"{node.node.podman.image} is {mine[:12]} here, {theirs[:12]} on {head.name}"
    )

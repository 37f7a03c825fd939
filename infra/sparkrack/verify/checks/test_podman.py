"""Podman: a rootless service user able to lock memory for NCCL, its containers on the host
network with the Plan's env (never NCCL_IB_DISABLE), and one image id across the rack."""

from __future__ import annotations

from typing import Any

from sparkrack.facts.podman import container_env, created_with, image_id, rootless
from sparkrack.facts.proc import memlock
from sparkrack.facts.units import main_pid
from sparkrack.facts.users import account, linger, subids
from sparkrack.plan.engine import INFINIBAND
from sparkrack.verify.checks.readings import container_record, read, read_as_service_user
from sparkrack.verify.checks.subjects import Container, Node, needs
from sparkrack.verify.inventory import Inventory

NCCL_PREFIX = "NCCL_"
# Every container sparkrack runs shares the host's network (resources/container_unit.py): NCCL
# and Ray reach the fabric and the management network as the node does.
HOST_NETWORK = "host"
FORBIDDEN_ENV = "NCCL_IB_DISABLE"  # forced TCP sockets and cost 58% (seed 001)


@needs("base")
def test_service_user_subids(host: Any, node: Node) -> None:
    user = node.user
    for kind in ("subuid", "subgid"):
        mine = read(host, subids(kind)).get(user, ())
        assert mine, f"{user} has no range in /etc/{kind}"
        count = int(mine[0].partition(":")[2])
        assert count >= 65536, f"{user}'s range in /etc/{kind} is {user}:{mine[0]}"


@needs("base")
def test_service_user_linger(host: Any, node: Node) -> None:
    user = node.user
    assert read(host, linger(user)), f"{user} does not linger"


@needs("base")
def test_user_manager_memlock(host: Any, node: Node) -> None:
    user = node.user
    found = read(host, account(user))
    assert found is not None, f"no user {user}"
    uid = found.uid
    pid = read(host, main_pid(f"user@{uid}.service"))
    assert pid, f"{user}'s user manager (user@{uid}.service) is not running"
    soft, hard = read(host, memlock(pid))
    # Its containers inherit both: the hard limit is as far as any of them may raise its own.
    want = node.node.memlock_limit
    assert want.granted_by(soft) and want.granted_by(hard), (
        f"user@{uid}.service memlock soft {soft}, hard {hard}, want {want.proc()}"
    )


@needs("inference")
def test_container_running(host: Any, container: Container) -> None:
    state = container_record(host, container.user, container.container.name)["State"]
    assert state["Running"], f"{container.container.name} is {state['Status']}"


@needs("inference")
def test_container_rootless(host: Any, container: Container) -> None:
    user = container.user
    found = read_as_service_user(host, user, rootless())
    assert found, f"{user}'s podman is not rootless" + (" (no answer)" if found is None else "")
    container_record(host, container.user, container.container.name)


@needs("inference")
def test_container_host_network(host: Any, container: Container) -> None:
    record = container_record(host, container.user, container.container.name)
    mode = record["HostConfig"]["NetworkMode"]
    assert mode == HOST_NETWORK, f"{container.container.name} network {mode}, want {HOST_NETWORK}"


@needs("inference")
def test_container_env(host: Any, container: Container) -> None:
    record = container_record(host, container.user, container.container.name)
    live = container_env(record)
    want = container.container.env
    wrong = {k: live.get(k) for k, v in want.items() if live.get(k) != v}
    extra = sorted(k for k in live if k.startswith(NCCL_PREFIX) and k not in want)
    assert not wrong and not extra, (
        f"{container.container.name} env differs from the Plan: "
        + ", ".join(f"{k}={v!r} (want {want[k]!r})" for k, v in wrong.items())
        + (f" not planned: {', '.join(extra)}" if extra else "")
    )


# What a container lacks without a device the Plan gives it, by the device's kind.
WITHOUT_DEVICE = {INFINIBAND: "NCCL would run on TCP sockets (seed 001)"}
WITHOUT_GPU = "no GPU in it: vLLM stops at start-up"


@needs("inference")
def test_container_devices(host: Any, container: Container) -> None:
    """The devices the Plan gives it (the GPU by CDI name, the RDMA device nodes NCCL opens),
    as the running container was created with them."""
    record = container_record(host, container.user, container.container.name)
    given = created_with(record, "--device")
    missing = [d for d in container.container.devices if d not in given]
    assert not missing, f"{container.container.name} was created without " + "; ".join(
        f"{device} ({WITHOUT_DEVICE.get(device, WITHOUT_GPU)})" for device in missing
    )


@needs("inference")
def test_container_memlock(host: Any, container: Container) -> None:
    """What its process may lock, as the kernel holds it: NCCL registers its RDMA buffers and,
    given less than the node declares, silently takes TCP sockets."""
    state = container_record(host, container.user, container.container.name)["State"]
    assert state["Pid"], f"{container.container.name} has no process ({state['Status']})"
    soft, _ = read(host, memlock(state["Pid"]))
    want = container.node.memlock_limit
    assert want.granted_by(soft), (
        f"{container.container.name} may lock {soft} bytes, want {want.proc()}: NCCL would run "
        "on TCP sockets"
    )


@needs("inference")
def test_nccl_ib_disable_absent(host: Any, container: Container) -> None:
    record = container_record(host, container.user, container.container.name)
    live = container_env(record)
    assert FORBIDDEN_ENV not in live, (
        f"{container.container.name} sets {FORBIDDEN_ENV}={live[FORBIDDEN_ENV]}: "
        "NCCL would run on sockets"
    )


def image_of(host: Any, user: str, image: str) -> str:
    found = read_as_service_user(host, user, image_id(image))
    assert found, f"no image {image} for {user}"
    return found


@needs("inference")  # the serving image is shipped to every node by the inference role
def test_image_id(host: Any, hosts: Any, inventory: Inventory, node: Node) -> None:
    image, head = inventory.plan.serving.image, inventory.plan.head_node
    mine = image_of(host, node.user, image)
    theirs = image_of(hosts[head], node.user, image)
    assert mine == theirs, f"{image} is {mine[:12]} here, {theirs[:12]} on {head}"

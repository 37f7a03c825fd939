"""The inference role on the package's deployed sim-2 (issue 7), after the monitoring checks:
Ray has both nodes and the engine stand-in serves /v1/models on the management network; each
node's Hugging Face cache holds the whole checkpoint, seen by the engine's container where vLLM
would read it; the engine log shows each rank's RoCE line naming the Plan's HCAs; `sparkrack
verify` passes; a second look changes nothing; NCCL_IB_DISABLE=1 added by hand to a worker's
container, with seed 001's other two ways off RoCE (no /dev/infiniband, a memlock limit below
the declared need), makes the engine serve on sockets (the alarm fires), shows as drift on
exactly that Container and fails verification naming the node and each check, and one `pulumi
up` repairs it; so it does a fabric port set down (its RDMA port follows and RdmaPortDown
matches; the engine restarted meanwhile keeps one HCA until `up` restarts it), a stopped worker
(Ray loses the node, the engine stops with its rank and comes back with it), and a worker whose
GPU was dropped (the engine refuses to start until `up` gives it back); a stack that sets
NCCL_IB_DISABLE is refused before any resource exists; and last, destroy removes the engine and
keeps the weights.

The stand-in image is built on this machine (sim-2 declares `engine.source: control`) and loaded
on the head over SSH; the worker gets it from the head over the fabric.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import time
from typing import Any

import pytest

from sparkrack.facts.nccl_env import ENGINE_START, nccl_transport
from sparkrack.facts.podman import parse_log_file
from sparkrack.facts.ray import alive_nodes_command, parse_alive_nodes
from sparkrack.plan import Plan
from sparkrack.plan.weights import hf_cache_repo
from sparkrack.text.commands import by_user_manager, podman_exec
from tests.e2e.conftest import SIM_API_KEY, SPARKRACK, PulumiProject
from tests.e2e.programs.weights.checkpoint import make_command
from tests.e2e.sim_fixtures import SERVICE_USER, as_service, poll, private_cluster, ssh
from tests.e2e.traffic import Attempt, Traffic
from tests.e2e.weights_checks import CHECKPOINT, MODEL_DIR, SNAPSHOT, listing

from .rack import KNOCK, PREFIX, STACK, TIMES, changes, prometheus, verify_table

pytestmark = pytest.mark.e2e

WORKER_UNIT = "~/.config/systemd/user/ray-worker.service"


def ray_alive() -> str:
    """The alive Ray nodes' addresses as JSON (`ray status` lists dead workers too)."""
    query = podman_exec("ray-head", alive_nodes_command())
    return ssh(STACK, "spark-1", as_service(query), check=False)


def alive_or_none(out: str) -> tuple[str, ...] | None:
    """The alive nodes' addresses `ray_alive` printed, None before Ray prints a list."""
    try:
        return parse_alive_nodes(out)
    except ValueError:
        return None


def ray_rejoined(plan: Plan) -> None:
    """Wait for every node to be alive in Ray again: a restarted worker joins a moment after
    its container runs, and until then the head's Ray cluster is short of a node."""
    want = tuple(sorted(node.address for node in plan.nodes))
    alive = poll(ray_alive, lambda out: alive_or_none(out) == want, 120)
    assert alive_or_none(alive) == want, alive[-1000:]


def worker_env() -> str:
    inspect = "podman inspect --format '{{.Config.Env}}' ray-worker"
    return ssh(STACK, "spark-2", as_service(inspect), check=False)


def engine_log(check: bool = True) -> str:
    return ssh(STACK, "spark-1", as_service("podman logs vllm 2>&1"), check=check)


def engine_log_file(plan: Plan) -> str:
    """The engine's log file on the head: a refusing engine's container is gone a moment after
    it logs (`--rm`), the file keeps its words."""
    path = plan.node(plan.head_node).paths.engine_log
    return ssh(STACK, plan.head_node, f"sudo cat {path}", check=False)


def since_start(log: str) -> str:
    """The running engine's part of its log: the file outlives the container, a restarted
    engine appends to it."""
    return log.split(ENGINE_START)[-1]


def test_up_brings_up_ray_and_serves_the_model(deploy: PulumiProject, plan: Plan) -> None:
    assert parse_alive_nodes(ray_alive()) == tuple(sorted(node.address for node in plan.nodes))
    # the API on the management network, from this machine
    url = f"http://{plan.node(plan.head_node).address}:{plan.serving.port}/v1/models"
    asked = ["curl", "-sf", "-H", f"Authorization: Bearer {SIM_API_KEY}", url]
    models = json.loads(subprocess.run(asked, capture_output=True).stdout)
    assert [model["id"] for model in models["data"]] == [plan.serving.served_model_name]


def test_the_api_container_checks_its_own_health(deploy: PulumiProject, plan: Plan) -> None:
    """Podman runs the planned /health check in the vLLM container, and it passes: a server
    whose engine died would fail it three times and be killed for its unit to restart."""
    # exits non-zero when unhealthy
    check = by_user_manager(["podman", "healthcheck", "run", "vllm"])  # execs: podman_exec's why
    ssh(STACK, plan.head_node, as_service(check))
    health = "podman inspect --format '{{.State.Health.Status}}' vllm"
    state = ssh(STACK, plan.head_node, as_service(health))
    assert state in ("healthy", "starting"), state


def test_ray_ranks_run_on_the_planned_addresses(deploy: PulumiProject, plan: Plan) -> None:
    log = engine_log()
    for rank, node in enumerate(plan.nodes):
        assert f"rank {rank} on {node.name} ({node.address})" in log, log[-2000:]


def test_rays_every_address_ports_answer_only_on_the_management_address(
    deploy: PulumiProject, plan: Plan
) -> None:
    """Ray holds its GCS and managers on every address (ss shows the wildcard); the node's
    fence answers them on the management address only and resets them on every fabric one."""
    found, planned = {}, {}
    for node in plan.nodes:
        other = next(each.name for each in plan.nodes if each.name != node.name)
        fabric = [link.address.split("/")[0] for link in node.links if link.address]
        for listener in node.listeners:
            if not (listener.everywhere and listener.always):
                continue
            held = ssh(STACK, node.name, f"ss -Hltn 'sport = :{listener.port}'")
            assert f"*:{listener.port}" in held, f"{node.name}: Ray no longer binds everywhere?"
            for address in (node.address, *fabric):
                knock = f"python3 -c {shlex.quote(KNOCK)} {address} {listener.port}"
                found[f"{address}:{listener.port}"] = ssh(STACK, other, knock)
                planned[f"{address}:{listener.port}"] = (
                    "answers" if address == node.address else "refused"
                )
    assert found == planned


def nccl_lines_of(lines: list[str], node: str) -> list[str]:
    """`node`'s NCCL lines, as they reach the engine's log through Ray: behind Ray's prefix
    `(RayWorkerWrapper pid=..., ip=...) `, then NCCL's own `host:pid:tid [gpu]`."""
    own = re.compile(rf"^\(RayWorkerWrapper pid=\d+, ip=[0-9.]+\) {re.escape(node)}:\d+:\d+ ")
    return [line for line in lines if own.match(line)]


def test_engine_log_shows_roce_on_the_plans_hcas(deploy: PulumiProject, plan: Plan) -> None:
    lines = engine_log().splitlines()
    for node in plan.nodes:
        mine = nccl_lines_of(lines, node.name)
        using = [line for line in mine if "NET/IB : Using" in line]
        assert using, f"no NET/IB line from {node.name}"
        devices = " ".join(f"[{i}]{hca}:1/RoCE" for i, hca in enumerate(node.rdma_devices))
        assert f"NET/IB : Using {devices} [RO]; OOB {node.management_nic}" in using[-1]
        assert not [line for line in mine if "NET/Socket" in line]
    # The crossed cables: spark-1's port 0 halves and spark-2's port 1 halves, one cable each,
    # connected through the simulated fabric as NCCL's queue pairs would be (stand-in reach.py).
    assert "stand-in: ranks 0 and 1: their HCAs reach each other" in lines
    assert not [line for line in lines if "ibv_modify_qp failed" in line]


def test_every_node_holds_the_checkpoint_where_the_engine_reads_it(
    deploy: PulumiProject, plan: Plan
) -> None:
    source = listing(STACK, plan.head_node, CHECKPOINT)
    assert len(source) == 5  # 3 shards, the index, config.json
    snapshot = SNAPSHOT.format(repo=plan.serving.model.replace("/", "--"))
    for node in ("spark-1", "spark-2"):
        assert listing(STACK, node, snapshot) == source, node
    # the snapshot, as the engine's container sees it in its Hugging Face cache
    inside = snapshot.replace(MODEL_DIR, "/root/.cache/huggingface")
    seen = ssh(STACK, "spark-2", as_service(podman_exec("ray-worker", ["ls", inside]))).split()
    assert sorted(seen) == sorted(source)
    # ...and with the Hub offline, so that no node fetches the model again by itself
    for node, container in (
        ("spark-1", "vllm"),
        ("spark-1", "ray-head"),
        ("spark-2", "ray-worker"),
    ):
        env = ssh(STACK, node, as_service(podman_exec(container, ["printenv", "HF_HUB_OFFLINE"])))
        assert env == "1", f"{node} {container}"


def test_verify_passes(deploy: PulumiProject) -> None:
    done = verify_table(deploy)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    for check in ("test_ray_node_count", "test_model_served", "test_nccl_transport"):
        assert f"inference   {check}" in done.stdout


def test_a_second_look_changes_nothing(deploy: PulumiProject) -> None:
    assert changes(deploy) == {}


def engine_says(node: str, network: str) -> str:
    """The running engine's log once it serves again with `node`'s rank on `network` (IB or
    Socket): a restarted rank ends the engine, whose unit starts a whole one again."""

    def settled(log: str) -> bool:
        current = since_start(log)
        return (
            f"{node}:" in current
            and f"NCCL INFO Using network {network}" in current
            and "stand-in OpenAI API on" in current
        )

    # Between the engine's stop and its next start there is no container to read.
    log = poll(lambda: engine_log(check=False), settled, 300)
    assert settled(log), log[-3000:]
    return since_start(log)


def fallback_alert(plan: Plan) -> list[dict[str, object]]:
    """The NcclSocketFallback alerts Prometheus has firing."""
    data = prometheus(plan, "query", query='ALERTS{alertname="NcclSocketFallback"}') or {}
    return [a for a in data.get("result", []) if a["metric"].get("alertstate") == "firing"]


# What preview names on the worker edited three ways and moved off its cores.
WORKER_EDITED = {"cpuset", "devices", "env", "ulimits", "unit_sha256"}


def test_ib_disable_by_hand_falls_back_to_sockets_fires_the_alarm_and_up_repairs_it(
    deploy: PulumiProject, plan: Plan
) -> None:
    """Seed 001's week: NCCL_IB_DISABLE=1 slipped into a worker, with its other two silent ways
    off RoCE in a rootless container in the same unit (no /dev/infiniband, a memlock limit below
    NCCL's need). As on real hardware the engine serves on (its rank restarted, the engine with
    it), over TCP: the engine log says so (NCCL's first reason: IB disabled), the collector's
    metric reads 1, the alert fires, verification names each cause on spark-2; one `up`
    repairs the container, the engine comes back on RoCE and the alarm clears. The same worker
    is also moved by hand off its compute cores (`taskset`, as a tuning script might): preview
    and verification name its cpuset too, and the same `up` recreates it on them. (Each cause
    alone, as the stand-in tells it, is test_standin_image's.)"""
    edit = "sed -i " + " ".join(
        f"-e {shlex.quote(expression)}"
        for expression in (
            "s| --network=host | --network=host --env=NCCL_IB_DISABLE=1 |",
            "s| --device=/dev/infiniband | |",
            "s|--ulimit=memlock=[0-9:-]*|--ulimit=memlock=65536:65536|",
        )
    )
    edit = f"{edit} {WORKER_UNIT}"
    restart = "systemctl --user daemon-reload && systemctl --user restart ray-worker"
    ssh(STACK, "spark-2", as_service(f"{edit} && {restart}"))
    # `restart` returns once the unit runs `podman run`, a moment before the container exists.
    env = poll(worker_env, lambda out: "NCCL_IB_DISABLE=1" in out, 60)
    assert "NCCL_IB_DISABLE=1" in env
    ray_rejoined(plan)
    on_sockets = engine_says("spark-2", "Socket")
    assert "stand-in: rank 1 on sockets: NCCL_IB_DISABLE=1" in on_sockets
    firing = poll(lambda: json.dumps(fallback_alert(plan)), lambda out: out != "[]", 120)
    assert '"node": "spark-1"' in firing, firing  # the engine's log, read on the head
    pid = as_service("podman inspect --format '{{.State.Pid}}' ray-worker")
    housekeeping_cores = plan.node("spark-2").cpus.housekeeping.kernel()
    ssh(STACK, "spark-2", f"sudo -n taskset -apc {housekeeping_cores} $({pid}) >/dev/null")
    drift = changes(deploy)
    operation, properties = drift.pop("spark-2-ray-worker")
    assert (operation, set(properties)) == ("update", WORKER_EDITED), drift
    # its rank 1 on sockets (restarted_at: an output the update sets, shown beside)
    assert drift == {"spark-1-engine-transport": ("update", ["restarted_at", "transport"])}
    done = verify_table(deploy)
    assert done.returncode != 0
    assert "FAIL spark-2 test_nccl_ib_disable_absent[spark-2-ray-worker]" in done.stdout
    assert "ray-worker sets NCCL_IB_DISABLE=1: NCCL would run on sockets" in done.stdout
    assert "FAIL spark-2 test_nccl_transport[spark-2]" in done.stdout
    assert "NCCL fell back to sockets" in done.stdout
    assert "FAIL spark-2 test_container_env[spark-2-ray-worker]" in done.stdout
    assert "not planned: NCCL_IB_DISABLE" in done.stdout
    assert "FAIL spark-2 test_container_cpuset[spark-2-ray-worker]" in done.stdout
    assert "ray-worker runs on cores" in done.stdout
    for failure in (
        "FAIL spark-2 test_container_devices[spark-2-ray-worker]: ray-worker was created without"
        " /dev/infiniband",
        "FAIL spark-2 test_container_memlock[spark-2-ray-worker]: ray-worker may lock 65536 bytes",
    ):
        assert failure in done.stdout, done.stdout[-3000:]
    started = time.monotonic()
    deploy.run("up", "--stack", STACK, "--yes", "--skip-preview")
    TIMES["repair (ray-worker)"] = round(time.monotonic() - started, 1)
    env = worker_env()
    assert "NCCL_IB_DISABLE" not in env
    ray_rejoined(plan)
    engine_says("spark-2", "IB")
    cleared = poll(lambda: json.dumps(fallback_alert(plan)), lambda out: out == "[]", 120)
    assert cleared == "[]"
    assert changes(deploy) == {}
    assert verify_table(deploy).returncode == 0


# What follows a worker's fault on the head: Ray a node short, the engine stopped with its rank.
ENGINE_FOLLOWERS = {
    "spark-1-ray-cluster",
    "spark-1-vllm",
    "spark-1-served-model",
    "spark-1-engine-transport",  # a rank on sockets, until the engine restarts with it
}


def settled_changes(deploy: PulumiProject) -> dict[str, tuple[str, list[str]]]:
    """What a refreshing preview plans once the engine is through restarting with its ranks:
    looked at again (twice at most, 20 s apart) while only the engine's followers differ, as
    they do while vLLM's engine restarts (once in CI, after a worker's repair, the engine went
    down again a moment after serving); any other drift is the answer at once."""
    drift = changes(deploy)
    for _ in range(2):
        if not drift or set(drift) - ENGINE_FOLLOWERS:
            return drift
        time.sleep(20)
        drift = changes(deploy)
    return drift


def up_repairs_the_worker(deploy: PulumiProject, plan: Plan) -> None:
    """`up` puts the worker back: Ray has both nodes, the engine serves on RoCE again, nothing
    is left to change and verification passes."""
    deploy.run("up", "--stack", STACK, "--yes", "--skip-preview")
    ray_rejoined(plan)
    engine_says("spark-2", "IB")
    assert settled_changes(deploy) == {}
    done = verify_table(deploy)
    assert done.returncode == 0, done.stdout[-3000:]


def test_a_stopped_container_is_drift_and_fails_verification(
    deploy: PulumiProject, plan: Plan
) -> None:
    """The worker stopped: its container is gone, the head's Ray loses the node once its health
    checks fail, and the engine stops with its rank, so the API no longer answers. Verification
    names all three on their nodes; `up` starts the worker and waits for Ray and the model."""
    # The unit runs `podman run --rm`: a stopped worker leaves no container behind.
    ssh(STACK, "spark-2", as_service("systemctl --user stop ray-worker"))
    head_alone = (plan.node("spark-1").address,)
    alone = poll(ray_alive, lambda out: alive_or_none(out) == head_alone, 120)
    assert alive_or_none(alone) == head_alone, alone[-1000:]
    assert poll(lambda: served(plan), lambda out: out == "", 120) == ""
    drift = changes(deploy)
    assert "running" in drift.pop("spark-2-ray-worker")[1]
    assert set(drift) <= ENGINE_FOLLOWERS, drift
    done = verify_table(deploy)
    assert done.returncode != 0
    for check in ("test_container_running", "test_container_rootless"):
        assert f"FAIL spark-2 {check}[spark-2-ray-worker]" in done.stdout, check
    assert "no container ray-worker for user sparkrack" in done.stdout
    assert "FAIL spark-1 test_ray_node_count" in done.stdout, done.stdout[-3000:]
    assert "Ray has 1 alive nodes; missing spark-2" in done.stdout
    assert "FAIL spark-1 test_model_served" in done.stdout, done.stdout[-3000:]
    up_repairs_the_worker(deploy, plan)


def rdma_port_down_alert(plan: Plan, device: str) -> str:
    """The RdmaPortDown alert's state for `device` on spark-2 ('' while the rule has not matched):
    pending as soon as the rule sees the port down, firing a minute later."""
    data = prometheus(plan, "query", query='ALERTS{alertname="RdmaPortDown"}') or {}
    states = [
        a["metric"]["alertstate"]
        for a in data.get("result", [])
        if a["metric"].get("node") == "spark-2" and a["metric"].get("device") == device
    ]
    return ",".join(states)


def test_a_fabric_port_set_down_is_named_on_its_node_and_up_sets_it_up(
    deploy: PulumiProject, plan: Plan
) -> None:
    """A port of spark-2 set down: its RDMA port follows, RdmaPortDown matches, preview names the
    link and verification names both ends. The engine restarted meanwhile starts its rank there
    on the one HCA NCCL finds, and stays there: preview adds the engine's transport and
    verification the HCA the rank lacks. One `up` sets the port up, then restarts the engine,
    which comes back on both HCAs: nothing is left to change and verification passes."""
    node = plan.node("spark-2")
    [link] = [link for link in node.links if link.netdev == "enP2p1s0f1np1"]
    port, device = link.netdev, link.rdma_device
    assert device is not None and link.peer_node and link.peer_netdev
    ssh(STACK, "spark-2", f"sudo -n ip link set {port} down")
    alert = poll(lambda: rdma_port_down_alert(plan, device), lambda out: out != "", 120)
    assert alert in ("pending", "firing"), alert
    drift = changes(deploy)
    assert drift.pop(f"spark-2-{port}") == ("update", ["routes", "up"])  # down: no route
    assert drift == {}
    done = verify_table(deploy)
    assert done.returncode != 0
    for failure in (
        f"FAIL spark-2 test_link_up[spark-2-{port}]: {port} is set down",
        f"FAIL spark-2 test_rdma_port_active[spark-2-{device}]: {device} port 1 is '1: DOWN'",
        f"FAIL {link.peer_node} test_link_up[{link.peer_node}-{link.peer_netdev}]: "
        f"{link.peer_netdev} is up without a carrier",
    ):
        assert failure in done.stdout, done.stdout[-3000:]
    ssh(STACK, "spark-1", as_service("systemctl --user restart vllm"))

    def on_one_hca(log: str) -> bool:  # the new start's rank 1 line, not the last start's
        lines = parse_log_file(log) or ()  # the file's k8s-file records, as verification reads
        return len(nccl_transport(lines, "spark-2").roce_ports) == 1

    log = poll(lambda: engine_log_file(plan), on_one_hca, 300)
    assert on_one_hca(log), log[-3000:]
    engine_says("spark-2", "IB")
    drift = changes(deploy)
    assert drift.pop(f"spark-2-{port}") == ("update", ["routes", "up"])
    # The served model waits on the engine's restart: its `after` follows the transport's.
    assert drift.pop("spark-1-served-model", ("update", ["after"])) == ("update", ["after"])
    assert drift == {"spark-1-engine-transport": ("update", ["restarted_at", "transport"])}
    done = verify_table(deploy)
    assert done.returncode != 0
    assert "FAIL spark-2 test_nccl_transport[spark-2]" in done.stdout, done.stdout[-3000:]
    assert f"missing ['{device}']" in done.stdout, done.stdout[-3000:]
    started = time.monotonic()
    deploy.run("up", "--stack", STACK, "--yes", "--skip-preview")
    TIMES["repair (port, then the engine's transport)"] = round(time.monotonic() - started, 1)
    assert settled_changes(deploy) == {}
    done = verify_table(deploy)
    assert done.returncode == 0, done.stdout[-3000:]


def test_a_worker_without_its_gpu_stops_the_engine_and_up_gives_it_back(
    deploy: PulumiProject, plan: Plan
) -> None:
    """The CDI device dropped from the worker's unit by hand: its Ray still joins, but the
    engine's rank there finds no GPU and the engine stops, as vLLM's does. Verification names
    the worker's container and what it lacks, preview names the device, `up` gives it back."""
    edit = f"sed -i 's| --device=nvidia.com/gpu=all | |' {WORKER_UNIT}"
    restart = "systemctl --user daemon-reload && systemctl --user restart ray-worker"
    ssh(STACK, "spark-2", as_service(f"{edit} && {restart}"))
    refused = "rank 1 (spark-2): RuntimeError: No CUDA GPUs are available"
    log = poll(lambda: engine_log_file(plan), lambda out: refused in since_start(out), 300)
    assert refused in since_start(log), log[-3000:]
    drift = changes(deploy)
    assert drift.pop("spark-2-ray-worker") == ("update", ["devices", "unit_sha256"])
    assert set(drift) <= ENGINE_FOLLOWERS, drift
    done = verify_table(deploy)
    assert done.returncode != 0
    assert "FAIL spark-2 test_container_gpus[spark-2-ray-worker]: nvidia-smi -L in ray-worker" in (
        done.stdout
    )
    assert (
        "FAIL spark-2 test_container_devices[spark-2-ray-worker]: ray-worker was created without"
        " nvidia.com/gpu=all" in done.stdout
    )
    up_repairs_the_worker(deploy, plan)


def test_a_worker_on_hcas_of_another_cable_stops_the_engine_named_per_rank_pair(
    deploy: PulumiProject, plan: Plan
) -> None:
    """NCCL_IB_HCA on spark-2 edited by hand to its other port, whose cable does not reach the
    port spark-1 uses (sim-2's cables are crossed): the engine's queue pairs time out between
    the two ranks, as NCCL's do, and the engine stops. Verification names both ends of each
    pair that found no path (or, read while the engine's unit starts it again, spark-2's rank
    off its planned HCAs at the start that refused), and the worker's env; preview names the
    env, `up` puts it back."""
    worker = plan.node("spark-2")
    planned = worker.nccl_env["NCCL_IB_HCA"]
    other = ",".join(
        link.rdma_device
        for link in worker.links
        if link.rdma_device and link.rdma_device not in planned.split(",")
    )
    edit = f"sed -i 's|NCCL_IB_HCA={planned}|NCCL_IB_HCA={other}|' {WORKER_UNIT}"
    restart = "systemctl --user daemon-reload && systemctl --user restart ray-worker"
    ssh(STACK, "spark-2", as_service(f"{edit} && {restart}"))
    refused = "rank 0 (spark-1) and rank 1 (spark-2): no RDMA path between their HCAs"
    log = poll(lambda: engine_log_file(plan), lambda out: refused in out, 300)
    assert refused in log, log[-3000:]
    drift = changes(deploy)
    assert drift.pop("spark-2-ray-worker") == ("update", ["env", "unit_sha256"])
    assert set(drift) <= ENGINE_FOLLOWERS, drift
    done = verify_table(deploy)
    assert done.returncode != 0
    env_line = f"ray-worker env differs from the Plan: NCCL_IB_HCA='{other}' (want '{planned}')"
    assert f"FAIL spark-2 test_container_env[spark-2-ray-worker]: {env_line}" in done.stdout
    transport = [line for line in done.stdout.splitlines() if "test_nccl_transport[" in line]
    no_path = [line for line in transport if "NCCL's queue pairs found no path: spark-1 " in line]
    off_plan = [line for line in transport if f"missing {planned.split(',')}" in line]
    assert no_path or off_plan, done.stdout[-3000:]
    for line in no_path:
        assert " to spark-2 " in line and "not on one cable" in line, line
    up_repairs_the_worker(deploy, plan)


def served(plan: Plan) -> str:
    """The model ids the API lists, '' while it does not answer (asked from this machine)."""
    url = f"http://{plan.node(plan.head_node).address}:{plan.serving.port}/v1/models"
    key = f"Authorization: Bearer {SIM_API_KEY}"
    asked = subprocess.run(
        ["curl", "-sf", "--max-time", "3", "-H", key, url], capture_output=True, text=True
    )
    return " ".join(m["id"] for m in json.loads(asked.stdout)["data"]) if asked.stdout else ""


def state_outputs(deploy: PulumiProject, kind: str) -> dict[str, dict[str, Any]]:
    """The outputs of every resource of `kind` (its type's last part) in the stack's state,
    by resource name."""
    exported = json.loads(deploy.run("stack", "export", "--stack", STACK).stdout)
    resources = exported["deployment"]["resources"]
    return {
        r["urn"].rsplit("::", 1)[1]: r["outputs"] for r in resources if r["type"].endswith(kind)
    }


def rollout_state(deploy: PulumiProject) -> dict[str, Any]:
    """The engine rollout's outputs as the stack's state holds them."""
    return dict(state_outputs(deploy, ":EngineRollout")["spark-1-engine-rollout"])


def against(deploy: PulumiProject) -> dict[str, Any]:
    """`sparkrack plan --against --json`: the stack file's blast radius on the deployed rack."""
    stacks = str(deploy.root / "stacks")
    argv = [SPARKRACK, "plan", "--stack", STACK, "--stacks-dir", stacks, "--against", "--json"]
    done = subprocess.run(argv, env=deploy.env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return dict(json.loads(done.stdout))


DOWNTIME = re.compile(r"serves again: ([0-9.]+) s down")


def test_a_changed_serving_flag_drains_the_engine_and_up_returns_serving(
    deploy: PulumiProject, plan: Plan
) -> None:
    """`max_model_len` changed keeps the served name, and restarts the engine: while clients
    stream completions, `up` drains it first (vLLM admits nothing new and finishes what is in
    flight), restarts it, waits for the model again before verification, and prints the
    downtime, which is what a client probing the API saw (issue 31)."""
    deploy.edit_cluster(STACK, lambda cluster: cluster["serving"].update(max_model_len=65536))
    radius = against(deploy)  # said before `up`: the API alone restarts, nothing moves
    assert {n["node"]: n["restarts"] for n in radius["nodes"]} == {
        "spark-1": ["vllm"],
        "spark-2": [],
    }
    assert radius["serving_stops"] and {n["weight_bytes"] for n in radius["nodes"]} == {0}
    url = f"http://{plan.node(plan.head_node).address}:{plan.serving.port}"
    with Traffic(url, plan.serving.served_model_name) as traffic:
        first = poll(lambda: " ".join(a.outcome for a in traffic.streamed), bool, 30)
        assert first.startswith("ok"), first  # a first request served before `up`
        done = deploy.run("up", "--stack", STACK, "--yes", "--skip-preview")
        returned = time.time()
        assert served(plan) == plan.serving.served_model_name  # at once: up returned serving
        time.sleep(2)
    flags = ssh(STACK, plan.head_node, as_service("podman inspect --format '{{.Args}}' vllm"))
    assert "--max-model-len 65536" in flags
    rollout = rollout_state(deploy)
    stopped_at = float(rollout["stopped_at"])
    assert [a for a in traffic.streamed if a.outcome == "cut"] == []
    spanning = [a for a in traffic.streamed if a.started < stopped_at < a.ended]
    assert spanning, "no request was in flight when the drain began"
    assert {a.outcome for a in spanning} == {"ok"}
    assert rollout["in_flight"] >= 1, rollout
    printed = sorted(set(DOWNTIME.findall(done.stdout)))  # its progress line and diagnostics
    assert len(printed) == 1, done.stdout[-3000:]
    seen = traffic.downtime_seen(since=stopped_at)
    TIMES["rollout downtime printed, seen"] = (float(printed[0]), round(seen, 1))
    assert abs(float(printed[0]) - seen) <= 2.0, (printed, seen)
    after = against(deploy)  # deployed now: nothing left to do, and the downtime remembered
    assert not after["serving_stops"] and after["last_downtime_s"] == float(printed[0])
    late = [a for a in [*traffic.streamed, *traffic.probed] if a.started > returned]
    assert late and {a.outcome for a in late} == {"ok"}  # `up` returned with the API serving


SWAP_MODEL, SWAP_CHECKPOINT = "gemma-3-27b", "/srv/sparkrack-ckpt-b"


def moved_bytes(deploy: PulumiProject) -> dict[str, int]:
    """Each node's ModelShards: the bytes its last create or update moved onto the node."""
    shards = state_outputs(deploy, ":ModelShards")
    return {name: int(outputs.get("moved_bytes", -1)) for name, outputs in shards.items()}


def swap_to(deploy: PulumiProject, plan: Plan, model: str, checkpoint: str) -> list[Attempt]:
    """The stack's model and checkpoint changed, and one `up` while clients stream."""

    def edit(cluster: dict[str, Any]) -> None:
        cluster["model"] = model
        cluster["serving"]["weights"]["directory"] = checkpoint

    deploy.edit_cluster(STACK, edit)
    url = f"http://{plan.node(plan.head_node).address}:{plan.serving.port}"
    with Traffic(url, None) as traffic:
        deploy.run("up", "--stack", STACK, "--yes", "--skip-preview")
        assert served(plan) == model  # at once: up returned serving the other model
    return traffic.streamed


def test_a_model_swap_and_back_cuts_nothing_and_the_way_back_moves_no_bytes(
    deploy: PulumiProject, plan: Plan
) -> None:
    """Another model's checkpoint staged on every node while the first serves, then the drained
    switch; and back: the first model's files are still on the nodes, so the switch back moves
    zero weight bytes (counted by each node's ModelShards). No admitted request is cut either
    way (issue 31)."""
    place = f'sudo install -d -m 0755 -o "$(id -un)" {SWAP_CHECKPOINT}'
    ssh(STACK, plan.head_node, f"{place} && {make_command(SWAP_CHECKPOINT, 6, 2, 2**19)}")
    first: dict[str, str] = {}  # the stack's catalogue model (its served name too)
    deploy.edit_cluster(STACK, lambda cluster: first.update(model=cluster["model"]))
    there = swap_to(deploy, plan, SWAP_MODEL, SWAP_CHECKPOINT)
    forward = moved_bytes(deploy)
    back = swap_to(deploy, plan, first["model"], CHECKPOINT)
    TIMES["swap moved bytes, there and back"] = (forward, moved_bytes(deploy))
    assert [a for a in [*there, *back] if a.outcome == "cut"] == []
    assert there and back and {a.outcome for a in there + back} & {"ok"}
    assert min(forward.values()) > 0, forward  # the other model came to every node
    assert moved_bytes(deploy) == dict.fromkeys(forward, 0)


def test_a_hung_api_is_restarted_by_its_health_check_at_any_age(
    deploy: PulumiProject, plan: Plan
) -> None:
    """The API frozen (SIGSTOP: its port open, no answer) a moment after the engine restarted
    and loaded: with a startup probe for loading and no start period on the liveness check,
    Podman kills the container after three missed checks and its unit starts a whole engine, in
    about a minute; a single check with a 30-minute start period would have left it hung
    (issue 31). Until the startup probe's first success (at most its 10 s step after the API
    answers) a hang is taken for loading, as nothing can tell them apart."""
    name = plan.serving.served_model_name
    identity = as_service("podman inspect --format '{{.Id}} {{.State.Pid}}' vllm")
    health = as_service("podman inspect --format '{{.State.Health.Status}}' vllm")
    ssh(STACK, plan.head_node, as_service("systemctl --user restart vllm"))
    assert poll(lambda: served(plan), lambda out: out == name, 300) == name
    loaded = poll(lambda: ssh(STACK, plan.head_node, health, check=False), "healthy".__eq__, 60)
    assert loaded == "healthy", loaded
    first, pid = ssh(STACK, plan.head_node, identity).split()
    ssh(STACK, plan.head_node, as_service(f"kill -STOP {pid}"))
    frozen = time.monotonic()
    assert served(plan) == ""  # it answers nothing now
    again = poll(lambda: served(plan), lambda out: out == name, 240)
    took = round(time.monotonic() - frozen, 1)
    TIMES["hung API back"] = took
    assert again == name, f"still hung after {took}s"
    assert ssh(STACK, plan.head_node, identity).split()[0] != first  # a new engine, not a thaw
    assert took < 150, f"the hung API served again only after {took}s"
    assert settled_changes(deploy) == {}


def test_up_restarts_a_hung_api_instead_of_waiting_for_it(
    deploy: PulumiProject, plan: Plan
) -> None:
    """The loaded API frozen again, and `up` run at once: its refresh finds the model not
    served, and the wait for it kills and restarts the engine (its startup probe had passed:
    not loading, hung) instead of waiting up to half an hour (issue 31); `up` returns serving.
    Its health check would have done the same within about a minute; `up` gets there first."""
    name = plan.serving.served_model_name
    identity = as_service("podman inspect --format '{{.Id}} {{.State.Pid}}' vllm")
    health = as_service("podman inspect --format '{{.State.Health.Status}}' vllm")
    loaded = poll(lambda: ssh(STACK, plan.head_node, health, check=False), "healthy".__eq__, 120)
    assert loaded == "healthy", loaded
    first, pid = ssh(STACK, plan.head_node, identity).split()
    ssh(STACK, plan.head_node, as_service(f"kill -STOP {pid}"))
    frozen = time.monotonic()
    done = deploy.run("up", "--stack", STACK, "--yes", "--skip-preview")
    TIMES["hung API repaired by up"] = round(time.monotonic() - frozen, 1)
    assert "vllm had loaded and did not answer: killed and restarted" in done.stdout, done.stdout
    assert served(plan) == name
    assert ssh(STACK, plan.head_node, identity).split()[0] != first


def housekeeping(deploy: PulumiProject, kind: str, *action: str) -> dict[str, str]:
    """`sparkrack <kind> <action> --json` on the rack: each row's name -> verdict."""
    stacks = str(deploy.root / "stacks")
    argv = [SPARKRACK, kind, *action, "--stack", STACK, "--stacks-dir", stacks, "--json"]
    done = subprocess.run(argv, env=deploy.env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = json.loads(done.stdout)[kind]
    return {f"{row['node']} {row['name']}": row["verdict"] for row in rows}


# Images an owner's months leave behind: two earlier engines and one nothing names.
LEFTOVERS = (
    "localhost/sparkrack/engine-standin:older",
    "localhost/sparkrack/engine-standin:previous",  # the newest of the two: kept for a rollback
    "localhost/sparkrack/leftover:1",
)
IMPORT = (
    "set -e; rm -rf ~/hk && mkdir -p ~/hk/bin && cp /bin/busybox ~/hk/bin/ && "
    "for ref in {refs}; do echo $ref > ~/hk/ref; tar -C ~/hk -c . | podman import -q - $ref; "
    "sleep 1; done >/dev/null; rm -rf ~/hk"
)
OLD_MODEL = "models--old--model"


def test_housekeeping_prunes_exactly_what_nothing_uses_on_every_node(
    deploy: PulumiProject, plan: Plan
) -> None:
    """`images|weights list` and a bare `prune` change nothing; `prune --yes` removes what the
    Plan does not name and no container uses, keeping the previous engine for a rollback, on
    every node (issue 31)."""
    repo = hf_cache_repo(MODEL_DIR, plan.serving.model)
    stale = f"{MODEL_DIR}/hub/{OLD_MODEL}/snapshots/main"
    served_files = {
        node.name: listing(STACK, node.name, f"{repo}/snapshots/main") for node in plan.nodes
    }
    for node in plan.nodes:
        ssh(STACK, node.name, as_service(IMPORT.format(refs=" ".join(LEFTOVERS))))
        make = f"mkdir -p {stale} && head -c 4096 /dev/zero > {stale}/model.safetensors"
        ssh(STACK, node.name, as_service(make))
    images = housekeeping(deploy, "images", "list")
    weights = housekeeping(deploy, "weights", "list")
    for node in plan.nodes:
        older, previous, leftover = (f"{node.name} {ref}" for ref in LEFTOVERS)
        assert (images[older], images[previous], images[leftover]) == (
            "unreferenced",
            "rollback",
            "unreferenced",
        ), images
        assert images[f"{node.name} {plan.serving.image}"] == "planned"
        assert weights[f"{node.name} {OLD_MODEL}"] == "unreferenced"
        assert weights[f"{node.name} {repo.rsplit('/', 1)[1]}"] == "planned"
    assert housekeeping(deploy, "images", "prune") == images  # a dry run
    assert housekeeping(deploy, "weights", "prune") == weights
    housekeeping(deploy, "images", "prune", "--yes")
    housekeeping(deploy, "weights", "prune", "--yes")
    assert housekeeping(deploy, "images", "list") == {
        row: verdict for row, verdict in images.items() if verdict != "unreferenced"
    }
    assert housekeeping(deploy, "weights", "list") == {
        row: verdict for row, verdict in weights.items() if verdict != "unreferenced"
    }
    for node in plan.nodes:
        assert listing(STACK, node.name, f"{repo}/snapshots/main") == served_files[node.name]
    name = plan.serving.served_model_name
    assert poll(lambda: served(plan), lambda out: out == name, 60) == name  # still serving


def test_a_stack_setting_ib_disable_is_refused(deploy: PulumiProject) -> None:
    refused = f"{STACK}-ib-disable"
    config = private_cluster("sim-2", STACK, PREFIX)
    config["serving"]["env"] = {"NCCL_IB_DISABLE": "1"}
    deploy.write_stack(refused, config)
    deploy.run("stack", "init", refused)
    done = deploy.run("preview", "--stack", refused, check=False)
    assert done.returncode != 0
    assert "serving.env.NCCL_IB_DISABLE" in done.stdout + done.stderr
    assert "refused: NCCL_IB_DISABLE=1 on RDMA hardware" in done.stdout + done.stderr


def test_destroy_keeps_the_weights_and_removes_the_engine(deploy: PulumiProject) -> None:
    """The service user `up` made is kept with its home, where the weights and images are
    (issue 31): a destroy stops everything it runs and lists no file fewer there."""
    models = "find ~/.cache/huggingface -type f | sort"
    held = {}
    for node in ("spark-1", "spark-2"):
        ssh(STACK, node, as_service("echo weights > ~/.cache/huggingface/shard.safetensors"))
        held[node] = ssh(STACK, node, as_service(models))
    started = time.monotonic()
    done = deploy.run("destroy", "--stack", STACK, "--yes", "--skip-preview")
    TIMES["destroy"] = round(time.monotonic() - started, 1)
    assert "kept user sparkrack and /home/sparkrack" in done.stdout + done.stderr
    for node in ("spark-1", "spark-2"):
        assert ssh(STACK, node, as_service(models)) == held[node], node
        shard = as_service("cat ~/.cache/huggingface/shard.safetensors")
        assert ssh(STACK, node, shard) == "weights"
        assert ssh(STACK, node, f"pgrep -u {SERVICE_USER} -l || true") == "", node

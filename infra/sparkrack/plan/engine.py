"""The engine's containers: a Ray head or worker on every node, `vllm serve` beside the head.

Pure functions of the Plan and of the host directories they mount (the node's planned paths, in
`engine_containers`, which make_plan places on each NodePlan), so the exact command lines and env
are golden-tested without a node. Ray's actors, vLLM's workers
among them, inherit the raylet's env: the NCCL env goes on the Ray containers, not only on vLLM.
"""

from __future__ import annotations

import json

from sparkrack.plan.containers import ContainerPlan
from sparkrack.plan.listeners import RAY_FIXED_PORTS, RAY_WORKER_PORTS
from sparkrack.plan.model import NodePlan, Plan
from sparkrack.plan.parallel import RAY_PORT
from sparkrack.text.addresses import http_url

HEAD_CONTAINER = "ray-head"
WORKER_CONTAINER = "ray-worker"
API_CONTAINER = "vllm"
# Ray's session directory. The head's Ray and the vLLM driver share it: a driver reaches its
# node's raylet and object store through the unix sockets there, and reads the node's address
# from it (without it, Ray guessed the host's own address instead of --node-ip-address).
RAY_TMP = "/tmp/ray"
HF_CACHE = "/root/.cache/huggingface"  # HF_HOME's default inside the vLLM image
INFINIBAND = "/dev/infiniband"
# The engine log's bound: Podman then rotates it (the collector reads a shrunk log afresh).
ENGINE_LOG_MAX_SIZE = "--log-opt=max-size=64mb"


def ray_command(plan: Plan, node: NodePlan) -> tuple[str, ...]:
    """`ray start` in the foreground, on the node's planned address, with its GPUs declared."""
    common = (
        f"--node-ip-address={node.address}",
        f"--num-gpus={node.gpus}",
        *(f"{flag}={port}" for flag, port in RAY_FIXED_PORTS.items()),
        f"--min-worker-port={RAY_WORKER_PORTS[0]}",
        f"--max-worker-port={RAY_WORKER_PORTS[1]}",
        "--disable-usage-stats",
        "--block",
    )
    if node.role == "head":
        return (
            "ray",
            "start",
            "--head",
            f"--port={RAY_PORT}",
            "--include-dashboard=false",
            *common,
        )
    return ("ray", "start", f"--address={plan.layout.ray_head_address}", *common)


def vllm_command(plan: Plan) -> tuple[str, ...]:
    return ("vllm", "serve", *plan.serving.vllm_args)


def ray_container(plan: Plan, node: NodePlan, model_dir: str, ray_dir: str) -> ContainerPlan:
    """The node's Ray container. On the head, `ray_dir` is shared with the vLLM container."""
    options = [*engine_options(plan, model_dir)]
    if node.role == "head":
        options.append(f"--volume={ray_dir}:{RAY_TMP}")
    return ContainerPlan(
        name=HEAD_CONTAINER if node.role == "head" else WORKER_CONTAINER,
        image=plan.serving.image,
        command=ray_command(plan, node),
        env=dict(node.engine_env),
        devices=(*node.gpu_access.container_devices(), *engine_rdma(node)),
        ulimits={"memlock": node.memlock_limit.podman()},
        cpuset=node.cpus.cpuset(node.cpus.compute),
        options=tuple(options),
    )


def api_container(plan: Plan, model_dir: str, ray_dir: str, engine_log: str) -> ContainerPlan:
    """`vllm serve` on the head: the Ray driver, and the OpenAI API on every address. Its log,
    where every rank's NCCL lines arrive through Ray, also goes to `engine_log` on the node, for
    the RDMA collector's NCCL socket fallback metric (`podman logs vllm` still reads it)."""
    head = plan.node(plan.head_node)
    ray = ray_container(plan, head, model_dir, ray_dir)
    env = {**ray.env, "RAY_ADDRESS": plan.layout.ray_head_address}
    log = ("--log-driver=k8s-file", f"--log-opt=path={engine_log}", ENGINE_LOG_MAX_SIZE)
    return ray.model_copy(
        update={
            "name": API_CONTAINER,
            "command": vllm_command(plan),
            "env": env,
            "options": (*ray.options, *log, *health_options(plan), *api_key_options(plan)),
            # A driver whose Ray head restarted holds a dead cluster (the real vLLM stops; the
            # stand-in's Ray client spins against the new head): it restarts with its head.
            "part_of": HEAD_CONTAINER,
            "stop_timeout_s": plan.serving.drain_timeout_s + STOP_MARGIN_S,
        }
    )


# After its drain, vLLM still stops its engine and Ray workers: the stop waits this much longer
# before Podman kills it.
STOP_MARGIN_S = 30


# How often the loading engine's /health is asked: the startup probe's step, so a loaded model
# starts serving checks within this much of answering.
STARTUP_PROBE_S = 10
# After loading, a /health that misses LIVENESS_RETRIES asks LIVENESS_INTERVAL_S apart kills the
# container: a hung API is restarted in about a minute at any age (issue 31).
LIVENESS_INTERVAL_S = 15
LIVENESS_RETRIES = 3


def health_options(plan: Plan) -> tuple[str, ...]:
    """vLLM's /health, asked from inside the container: a server whose engine died (a Ray rank
    gone) stops answering it, and Podman then kills the container, so that its unit's restart
    policy starts a whole engine again instead of one that serves errors.

    Two probes, as Podman has them: a startup probe covers loading (as long as the role waits
    for the model to load, then it restarts the container), and the liveness check that follows
    its first success has no start period, so a hang is caught at any age. A single check with
    a start period as long as loading would let an API hung within it serve nothing for that
    long (half an hour)."""
    url = http_url(plan.serving.address, plan.serving.port, "/health")
    ask = json.dumps(
        ["python3", "-c", f"import urllib.request; urllib.request.urlopen({url!r}, timeout=5)"]
    )
    loading = int(plan.roles.inference.api_ready_timeout_s)
    return (
        f"--health-cmd={ask}",  # exec form: no shell inside
        f"--health-interval={LIVENESS_INTERVAL_S}s",
        "--health-timeout=10s",
        f"--health-retries={LIVENESS_RETRIES}",
        "--health-on-failure=kill",
        f"--health-startup-cmd={ask}",
        f"--health-startup-interval={STARTUP_PROBE_S}s",
        "--health-startup-timeout=10s",
        f"--health-startup-retries={-(-loading // STARTUP_PROBE_S)}",
    )


def api_key_options(plan: Plan) -> tuple[str, ...]:
    """The API's key, as vLLM reads it from its env (VLLM_API_KEY; `--api-key` would put it on
    the command line `ps` shows), from the Podman secret: never in the unit file or the Plan."""
    secret = plan.serving.api_key_secret
    return (f"--secret={secret},type=env,target=VLLM_API_KEY",) if secret else ()


def engine_rdma(node: NodePlan) -> tuple[str, ...]:
    """The RDMA devices NCCL opens (without them it silently takes TCP sockets: seed 001)."""
    return (INFINIBAND,) if node.rdma_devices else ()


def engine_options(plan: Plan, model_dir: str) -> tuple[str, ...]:
    return (f"--shm-size={plan.serving.shm_bytes}b", f"--volume={model_dir}:{HF_CACHE}")


def engine_containers(plan: Plan, node: NodePlan) -> tuple[ContainerPlan, ...]:
    """The engine containers on one node, in start order, at the node's planned paths: what
    make_plan places on the node (NodePlan.engine_containers)."""
    paths = node.paths
    ray = ray_container(plan, node, paths.model_dir, paths.ray_dir)
    if node.role != "head":
        return (ray,)
    return (ray, api_container(plan, paths.model_dir, paths.ray_dir, paths.engine_log))

"""Golden: the exact Ray and vLLM command lines, env and container options of the shipped real
stacks. gb10-2 is seed 001's pair (TP=2, 0.80, 131072, its NCCL set); gb10-16 is Kimi K3 split
layer by layer across sixteen boxes (TP 1 x PP 16, balanced, lighter stages at the ends)."""

from __future__ import annotations

import pytest

from sparkrack.plan import Plan
from sparkrack.plan.engine import (
    api_container,
    ray_container,
)
from sparkrack.text.limits import MemlockLimit
from tests.unit.support import SEED_001_NCCL, cluster, plan_of, refusal

# The real stacks stage their weights (serving.weights), so their engines load them offline.
HUB_OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}

MODELS, RAY = "/home/sparkrack/.cache/huggingface", "/home/sparkrack/.local/share/sparkrack/ray"
ENGINE_LOG = "/home/sparkrack/.local/share/sparkrack/engine/vllm.log"

GB10_OPTIONS = (
    "--shm-size=17179869184b",
    f"--volume={MODELS}:/root/.cache/huggingface",
)
KIMI_PARTITION = "5,5,6,6,6,6,6,6,6,6,6,6,6,6,6,5"


def plan(stack: str) -> Plan:
    return plan_of(stack, cluster(stack))


def test_gb10_2_ray_head() -> None:
    p = plan("gb10-2")
    head = ray_container(p, p.node("spark-1"), MODELS, RAY)
    assert head.name == "ray-head"
    assert head.command == (
        "ray", "start", "--head", "--port=6379", "--include-dashboard=false",
        "--node-ip-address=192.168.1.101", "--num-gpus=1",
        "--dashboard-agent-listen-port=52365", "--dashboard-agent-grpc-port=52366",
        "--runtime-env-agent-port=52367", "--metrics-export-port=52368",
        "--node-manager-port=52369", "--object-manager-port=52370",
        "--min-worker-port=52400", "--max-worker-port=52599",
        "--disable-usage-stats", "--block",
    )  # fmt: skip
    assert head.env == {
        **SEED_001_NCCL,
        **HUB_OFFLINE,
        "GLOO_SOCKET_IFNAME": "enP7s7",
        "VLLM_HOST_IP": "192.168.1.101",
    }
    assert head.devices == ("nvidia.com/gpu=all", "/dev/infiniband")  # CDI: the GB10 GPU
    assert head.ulimits == {"memlock": "-1:-1"}
    assert head.cpuset.kernel() == "5-9,15-19"  # the X925 cores
    assert head.options == (*GB10_OPTIONS, f"--volume={RAY}:/tmp/ray")


def test_gb10_2_ray_worker_joins_the_head_on_its_own_address() -> None:
    p = plan("gb10-2")
    worker = ray_container(p, p.node("spark-2"), MODELS, RAY)
    assert worker.name == "ray-worker"
    assert worker.command == (
        "ray", "start", "--address=192.168.1.101:6379", "--node-ip-address=192.168.1.102",
        "--num-gpus=1",
        "--dashboard-agent-listen-port=52365", "--dashboard-agent-grpc-port=52366",
        "--runtime-env-agent-port=52367", "--metrics-export-port=52368",
        "--node-manager-port=52369", "--object-manager-port=52370",
        "--min-worker-port=52400", "--max-worker-port=52599",
        "--disable-usage-stats", "--block",
    )  # fmt: skip
    assert worker.env == {
        **SEED_001_NCCL,
        **HUB_OFFLINE,
        "NCCL_IB_HCA": "rocep1s0f1,roceP2p1s0f1",  # its end of the cable spark-1's port 0 meets
        "GLOO_SOCKET_IFNAME": "enP7s7",
        "VLLM_HOST_IP": "192.168.1.102",
    }
    assert worker.options == GB10_OPTIONS  # Ray's session directory is the head's business


def test_gb10_2_vllm_serve() -> None:
    api = api_container(plan("gb10-2"), MODELS, RAY, ENGINE_LOG)
    assert api.name == "vllm"
    assert api.command == (
        "vllm", "serve", "minimax-m2.7-awq",
        "--served-model-name", "minimax-m2.7-awq",
        "--host", "192.168.1.101", "--port", "8000",  # the management address only
        "--tensor-parallel-size", "2", "--pipeline-parallel-size", "1",
        "--gpu-memory-utilization", "0.8", "--max-model-len", "131072", "--shutdown-timeout", "120",
        "--distributed-executor-backend", "ray", "--max-num-seqs", "4",
    )  # fmt: skip
    assert api.env == {
        **SEED_001_NCCL,
        **HUB_OFFLINE,
        "GLOO_SOCKET_IFNAME": "enP7s7",
        "VLLM_HOST_IP": "192.168.1.101",
        "RAY_ADDRESS": "192.168.1.101:6379",
    }
    assert "NCCL_IB_DISABLE" not in api.env
    ask = (
        '["python3", "-c", "import urllib.request; urllib.request.urlopen('
        "'http://192.168.1.101:8000/health', timeout=5)\"]"
    )
    # Loading (up to the role's 1800 s wait) is the startup probe's; the liveness check after it
    # has no start period: a hang is killed within about a minute at any age.
    health = (
        f"--health-cmd={ask}", "--health-interval=15s", "--health-timeout=10s",
        "--health-retries=3", "--health-on-failure=kill",
        f"--health-startup-cmd={ask}", "--health-startup-interval=10s",
        "--health-startup-timeout=10s", "--health-startup-retries=180",
    )  # fmt: skip
    assert not [option for option in api.options if option.startswith("--health-start-period")]
    assert api.options == (
        *GB10_OPTIONS, f"--volume={RAY}:/tmp/ray",
        "--log-driver=k8s-file", f"--log-opt=path={ENGINE_LOG}", "--log-opt=max-size=64mb",
        *health,
    )  # fmt: skip


def test_gb10_16_pipeline_across_sixteen_with_a_balanced_partition() -> None:
    p = plan("gb10-16")
    api = api_container(p, MODELS, RAY, ENGINE_LOG)
    assert api.command == (
        "vllm", "serve", "kimi-k3",
        "--served-model-name", "kimi-k3", "--host", "192.168.10.11", "--port", "8000",
        "--tensor-parallel-size", "1", "--pipeline-parallel-size", "16",
        "--gpu-memory-utilization", "0.85", "--max-model-len", "262144",
        "--shutdown-timeout", "120",
        "--distributed-executor-backend", "ray",
    )  # fmt: skip
    assert api.env["VLLM_PP_LAYER_PARTITION"] == KIMI_PARTITION
    assert sum(map(int, KIMI_PARTITION.split(","))) == 93  # Kimi K3's layers
    assert api.env["RAY_ADDRESS"] == "192.168.10.11:6379"


def test_gb10_16_every_worker_has_the_partition_and_its_own_address() -> None:
    p = plan("gb10-16")
    last = p.nodes[-1]
    worker = ray_container(p, last, MODELS, RAY)
    assert worker.command == (
        "ray", "start", "--address=192.168.10.11:6379", "--node-ip-address=192.168.10.26",
        "--num-gpus=1",
        "--dashboard-agent-listen-port=52365", "--dashboard-agent-grpc-port=52366",
        "--runtime-env-agent-port=52367", "--metrics-export-port=52368",
        "--node-manager-port=52369", "--object-manager-port=52370",
        "--min-worker-port=52400", "--max-worker-port=52599",
        "--disable-usage-stats", "--block",
    )  # fmt: skip
    # A switch, not crossed cables: NCCL_CROSS_NIC off; the rest of seed 001's set holds.
    assert worker.env == {
        **SEED_001_NCCL,
        **HUB_OFFLINE,
        "NCCL_CROSS_NIC": "0",
        "GLOO_SOCKET_IFNAME": "enP7s7",
        "VLLM_HOST_IP": "192.168.10.26",
        "VLLM_PP_LAYER_PARTITION": KIMI_PARTITION,
    }
    workers = [ray_container(p, node, MODELS, RAY).name for node in p.nodes[1:]]
    assert workers == ["ray-worker"] * 15


@pytest.mark.parametrize(("limit", "want"), [(None, "-1:-1"), (8 * 2**20, "8388608:8388608")])
def test_memlock_is_unlimited_or_what_the_node_declares(limit: int | None, want: str) -> None:
    p = plan("gb10-2")
    node = p.node("spark-1").model_copy(update={"memlock_limit": MemlockLimit(limit)})
    assert ray_container(p, node, MODELS, RAY).ulimits == {"memlock": want}


def test_gpus_come_from_the_hardware_profile() -> None:
    p = plan("gb10-2")
    eight = p.node("spark-1").model_copy(update={"gpus": 8})
    assert "--num-gpus=8" in ray_container(p, eight, MODELS, RAY).command


def test_the_head_runs_ray_and_vllm_the_others_ray_only() -> None:
    p = plan("gb10-2")
    names = {node.name: tuple(c.name for c in node.engine_containers) for node in p.nodes}
    assert names == {"spark-1": ("ray-head", "vllm"), "spark-2": ("ray-worker",)}


def test_staged_weights_run_the_engine_with_the_hub_offline() -> None:
    """No node downloads by itself: vLLM serves the staged snapshot from the node's copy."""
    staged = cluster("gb10-2")
    staged["serving"]["weights"] = {"source": "directory", "directory": "/srv/ckpt"}
    for node in plan_of("gb10-2", staged).nodes:
        assert node.engine_env["HF_HUB_OFFLINE"] == "1", node.name
        assert node.engine_env["TRANSFORMERS_OFFLINE"] == "1", node.name
    unstaged_cluster = cluster("gb10-2")
    del unstaged_cluster["serving"]["weights"]  # shipped staged (issue 31): taken out here
    unstaged = plan_of("gb10-2", unstaged_cluster).nodes[0].engine_env
    assert "HF_HUB_OFFLINE" not in unstaged  # the operator fills the model dir their own way


def test_the_hub_cannot_be_put_back_online_beside_staged_weights() -> None:
    staged = cluster("gb10-2")
    staged["serving"]["weights"] = {"source": "directory", "directory": "/srv/ckpt"}
    staged["serving"]["env"] = {"HF_HUB_OFFLINE": "0"}
    assert "serving.env.HF_HUB_OFFLINE: planned" in refusal("gb10-2", staged)

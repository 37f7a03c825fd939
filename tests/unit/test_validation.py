"""Every refusal names the stack, the node and the field, and says why."""

from __future__ import annotations

import pytest

from .support import cluster, plan_of, refusal

pytestmark = pytest.mark.unit


def test_duplicate_node_names() -> None:
    raw = cluster("gb10-2")
    raw["nodes"][1]["name"] = "spark-1"

    message = refusal("gb10-2", raw)

    assert "stack gb10-2: nodes[1] (spark-1).name: duplicate node name 'spark-1'" in message


def test_duplicate_management_addresses() -> None:
    raw = cluster("gb10-2")
    raw["nodes"][1]["address"] = "192.168.1.101"

    message = refusal("gb10-2", raw)

    assert (
        "stack gb10-2: nodes[0] (spark-1).address: address 192.168.1.101 is also used by spark-2"
        in message
    )
    assert "nodes[1] (spark-2).address: address 192.168.1.101 is also used by spark-1" in message


def test_cable_to_a_port_the_hardware_lacks() -> None:
    raw = cluster("gb10-2")
    raw["fabric"]["cables"][0]["b"] = "spark-2:port2"

    message = refusal("gb10-2", raw)

    assert message == (
        "stack gb10-2: fabric.cables[0].b (node spark-2): gx10 has no port 'port2';"
        " its ports: port0, port1"
    )


def test_port_used_twice() -> None:
    raw = cluster("gb10-2")
    raw["fabric"]["cables"][1]["a"] = "spark-1:port0"

    message = refusal("gb10-2", raw)

    assert message == (
        "stack gb10-2: fabric.cables[1].a (node spark-1): spark-1:port0 is already plugged at"
        " fabric.cables[0].a"
    )


def test_port_used_twice_on_a_switch() -> None:
    raw = cluster("gb10-16")
    raw["fabric"]["switch"]["ports"][1]["nodes"][0] = "spark-01"

    message = refusal("gb10-16", raw)

    assert (
        "fabric.switch.ports[1].nodes[0] (node spark-01): spark-01:port0 is already plugged"
        in message
    )
    assert "nodes[4] (spark-05): not plugged into the fabric" in message


def test_more_nodes_than_a_switch_port_breaks_out_to() -> None:
    raw = cluster("gb10-16")
    raw["fabric"]["switch"]["ports"][0]["breakout"] = 2

    message = refusal("gb10-16", raw)

    assert "stack gb10-16: fabric.switch.ports[0]: 4 nodes on a port with breakout 2" in message


def test_mtu_above_what_the_profile_carries() -> None:
    raw = cluster("gb10-2")
    raw["fabric"]["mtu"] = 9216

    message = refusal("gb10-2", raw)

    assert message == (
        "stack gb10-2: fabric.mtu (node spark-1): MTU 9216 exceeds the 9000 that gx10 carries"
    )


def test_mtu_above_the_switch() -> None:
    raw = cluster("gb10-16")
    raw["fabric"]["switch"]["max_mtu"] = 1500

    assert "fabric.mtu: MTU 9000 exceeds switch switch-1's max_mtu 1500" in refusal("gb10-16", raw)


def test_tp_that_does_not_divide_the_heads() -> None:
    raw = cluster("gb10-2")
    raw["model"] = {"catalog": "minimax-m2.7-awq", "attention": {"heads": 45, "kv_heads": 5}}

    message = refusal("gb10-2", raw)

    assert message == (
        "stack gb10-2: serving.tensor_parallel_size: 2 does not divide the 45 attention heads"
        " and 5 KV heads of minimax-m2.7-awq; sizes that do on 2 GPUs: 1"
    )


def test_tp_that_does_not_divide_the_kv_heads() -> None:
    raw = cluster("gb10-16")
    raw["model"] = {"catalog": "minimax-m2.7-awq", "attention": {"heads": 48, "kv_heads": 12}}
    raw["serving"] |= {"tensor_parallel_size": 8, "pipeline_parallel_size": 2}
    raw["serving"]["max_model_len"] = 131072

    assert refusal("gb10-16", raw) == (
        "stack gb10-16: serving.tensor_parallel_size: 8 does not divide the 48 attention heads"
        " and 12 KV heads of minimax-m2.7-awq; sizes that do on 16 GPUs: 1, 2, 4"
    )


def test_tp_times_pp_must_match_the_gpus() -> None:
    raw = cluster("gb10-2")
    raw["serving"]["pipeline_parallel_size"] = 2

    message = refusal("gb10-2", raw)

    assert message == (
        "stack gb10-2: serving.tensor_parallel_size: tensor_parallel_size x"
        " pipeline_parallel_size = 2 x 2 = 4, but the cluster has 2 GPUs (2 x gx10): vLLM with"
        " Ray runs one rank per GPU"
    )


def test_pp_greater_than_the_layers() -> None:
    raw = cluster("gb10-16")
    raw["model"] = {"catalog": "minimax-m2.7-awq", "layers": 8}
    raw["serving"]["max_model_len"] = 131072

    message = refusal("gb10-16", raw)

    assert message == (
        "stack gb10-16: serving.pipeline_parallel_size: 16 pipeline stages for the 8 layers of"
        " minimax-m2.7-awq: every stage needs at least one layer, so at most 8"
    )


@pytest.mark.parametrize("utilization", [0, -0.1, 1.2])
def test_gpu_memory_utilization_outside_0_1(utilization: float) -> None:
    raw = cluster("gb10-2")
    raw["serving"]["gpu_memory_utilization"] = utilization

    message = refusal("gb10-2", raw)

    assert message.startswith(
        f"stack gb10-2: serving.gpu_memory_utilization: {float(utilization)} is outside (0, 1]:"
        " it is the fraction of GPU-visible memory vLLM may claim"
    )


def test_gpu_memory_utilization_of_one_is_allowed() -> None:
    raw = cluster("gb10-2")
    raw["serving"]["gpu_memory_utilization"] = 1

    assert plan_of("gb10-2", raw).fit.gpu_memory_utilization == 1.0


@pytest.mark.parametrize("value", ["1", "true"])
def test_nccl_ib_disable_on_rdma_hardware_is_refused_with_its_cost(value: str) -> None:
    raw = cluster("gb10-2")
    raw["serving"]["env"] = {"NCCL_IB_DISABLE": value}

    message = refusal("gb10-2", raw)

    assert message.startswith(
        f"stack gb10-2: serving.env.NCCL_IB_DISABLE: refused: NCCL_IB_DISABLE={value} on RDMA"
        " hardware (spark-1, spark-2) forces NCCL onto TCP sockets."
    )
    assert "from 25 to 40.4 tok/s (58% faster)" in message


def test_nccl_ib_disable_zero_is_harmless() -> None:
    raw = cluster("gb10-2")
    raw["serving"]["env"] = {"NCCL_IB_DISABLE": "0"}

    assert plan_of("gb10-2", raw).nodes[0].engine_env["NCCL_IB_DISABLE"] == "0"


def test_nccl_ib_disable_is_allowed_where_there_is_no_rdma() -> None:
    raw = cluster("gb10-2")
    ports = [
        {"name": f"eth{i}", "speed_gbps": 100, "functions": [{"netdev": f"eth{i}"}]}
        for i in range(2)
    ]
    raw["hardware_profiles"] = {"gx10-no-rdma": {"base": "gx10", "ports": ports}}
    for node in raw["nodes"]:
        node["hardware"] = "gx10-no-rdma"
    raw["fabric"]["cables"] = [{"a": "spark-1:eth0", "b": "spark-2:eth1"}]
    raw["serving"]["env"] = {"NCCL_IB_DISABLE": "1"}

    plan = plan_of("gb10-2", raw)

    assert "NCCL_IB_HCA" not in plan.nodes[0].nccl_env
    assert plan.nodes[0].engine_env["NCCL_IB_DISABLE"] == "1"


def test_a_model_that_does_not_fit_says_by_how_much_and_what_would() -> None:
    raw = cluster("gb10-2")
    raw["model"] = "kimi-k3"
    raw["serving"]["max_model_len"] = 131072

    message = refusal("gb10-2", raw)

    assert message == (
        "stack gb10-2: model: kimi-k3 does not fit 2 x gx10: it needs 1.84 TB (1.56 TB of"
        " weights x 1.18 runtime budget) and they have 261 GB, 1.58 TB short. What would fit:"
        " 16 nodes of gx10 (tp 2 x pp 8); weights of at most 197 GB (~0.6 bits per parameter;"
        " mxfp4 is 1.56 TB, ~4.5); not a shorter context: the weights x 1.18 alone exceed the"
        " memory"
    )


def test_a_model_short_on_one_gpu_names_the_node_and_a_context_that_fits() -> None:
    raw = cluster("gb10-2")
    raw["serving"]["gpu_memory_utilization"] = 0.5

    message = refusal("gb10-2", raw)

    assert message.startswith(
        "stack gb10-2: model (node spark-1): minimax-m2.7-awq does not fit spark-1 (stage 0, 62"
        " of 62 layers): at gpu_memory_utilization 0.5 a GPU may use 65.3 GB but needs 79.8 GB"
        " (61 GB weights + 2.15 GB runtime reserve + 16.6 GB KV cache for one 131072-token"
        " sequence), 14.5 GB short. What would fit: 4 nodes of gx10 (tp 2 x pp 2);"
    )
    assert message.endswith("max_model_len 16384 or less (now 131072)")


def test_max_model_len_beyond_the_model() -> None:
    raw = cluster("gb10-2")
    raw["serving"]["max_model_len"] = 262144

    assert refusal("gb10-2", raw) == (
        "stack gb10-2: serving.max_model_len: 262144 exceeds the 204800 positions"
        " minimax-m2.7-awq was trained for"
    )


def test_a_typo_is_an_error_with_a_suggestion() -> None:
    raw = cluster("gb10-2")
    raw["fabric"]["mut"] = raw["fabric"].pop("mtu")

    assert refusal("gb10-2", raw) == "stack gb10-2: fabric.mut: unknown field; did you mean 'mtu'?"


def test_a_node_field_error_names_the_node() -> None:
    raw = cluster("gb10-2")
    raw["nodes"][1]["ssh"] = {"port": 70000}

    assert refusal("gb10-2", raw) == (
        "stack gb10-2: nodes[1] (spark-2).ssh.port: Input should be less than or equal to 65535"
        " (got 70000)"
    )


def test_unknown_hardware_profile() -> None:
    raw = cluster("gb10-2")
    raw["nodes"][0]["hardware"] = "gb11"

    assert refusal("gb10-2", raw) == (
        "stack gb10-2: nodes[0] (spark-1).hardware: unknown hardware profile 'gb11';"
        " known: b200-8, gb10, gb10-sim, gb200-4, gx10, h100-8, h20-8, h200-8"
    )


def test_unknown_catalogue_model() -> None:
    raw = cluster("gb10-2")
    raw["model"] = "kimi-k4"

    assert refusal("gb10-2", raw) == (
        "stack gb10-2: model: no catalogue model 'kimi-k4'; known: gemma-3-27b, gemma-3-27b-fp8,"
        " kimi-k3, minimax-m2.7-awq"
    )


def test_extra_args_may_not_override_the_plan() -> None:
    raw = cluster("gb10-2")
    raw["serving"]["extra_args"] = ["--enable-prefix-caching", "--tensor-parallel-size=1"]

    assert refusal("gb10-2", raw) == (
        "stack gb10-2: serving.extra_args: --tensor-parallel-size is planned from"
        " serving.tensor_parallel_size; set it there"
    )


def test_node_exporter_collectors_that_hang_under_rdma_load_are_refused() -> None:
    raw = cluster("gb10-2")
    raw["monitoring"] = {"node_exporter_collectors": ["cpu", "infiniband"]}

    message = refusal("gb10-2", raw)

    assert message.startswith(
        "stack gb10-2: monitoring.node_exporter_collectors: collector 'infiniband' hangs"
        " node-exporter under RDMA load (seed 001)"
    )


def test_static_addressing_needs_a_pool() -> None:
    raw = cluster("gb10-2")
    del raw["fabric"]["subnet"]

    assert refusal("gb10-2", raw) == (
        "stack gb10-2: fabric: static addressing needs a subnet to allocate from"
    )


def test_dhcp_on_direct_cables_is_refused_for_want_of_a_server() -> None:
    raw = cluster("gb10-2")
    raw["fabric"]["addressing"] = "dhcp"

    assert refusal("gb10-2", raw) == (
        "stack gb10-2: fabric: dhcp addressing needs a switch (its DHCP server); cables are static"
    )


def test_two_nodes_need_a_fabric() -> None:
    raw = cluster("gb10-2")
    del raw["fabric"]

    assert (
        refusal("gb10-2", raw) == "stack gb10-2: fabric: 2 nodes need a fabric (cables or a switch)"
    )


def test_every_problem_is_reported_at_once() -> None:
    raw = cluster("gb10-2")
    raw["fabric"]["mtu"] = 9216
    raw["serving"]["env"] = {"NCCL_IB_DISABLE": "1"}

    lines = refusal("gb10-2", raw).splitlines()

    assert [line.split(":")[1].strip() for line in lines] == [
        "fabric.mtu (node spark-1)",
        "serving.env.NCCL_IB_DISABLE",
    ]


def test_a_fabric_pool_too_small_for_its_links() -> None:
    raw = cluster("gb10-2")
    raw["fabric"]["subnet"] = "10.77.0.0/23"

    assert refusal("gb10-2", raw) == (
        "stack gb10-2: fabric.subnet: 10.77.0.0/23 holds 2 /24 subnets; the fabric needs 4"
    )


@pytest.mark.parametrize("name", ["HF_TOKEN", "VLLM_API_KEY", "hf_hub_token", "DB_PASSWORD"])
def test_a_credential_in_the_serving_env_is_refused(name: str) -> None:
    raw = cluster("sim-2")
    raw["serving"]["env"] = {name: "hf_abcdef"}
    message = refusal("sim-2", raw)
    assert f"stack sim-2: serving.env.{name}: looks like a credential" in message
    assert "sparkrack:hfToken" in message and "hf_abcdef" not in message


def test_env_names_that_only_mention_keys_in_passing_are_kept() -> None:
    raw = cluster("sim-2")
    raw["serving"]["env"] = {"NCCL_IB_QPS_PER_CONNECTION": "4", "KEYBOARD_LAYOUT": "us"}
    assert plan_of("sim-2", raw).nodes


def test_a_dotted_decimal_that_is_no_ipv4_address_is_a_typo_not_a_host_name() -> None:
    raw = cluster("gb10-2")
    raw["nodes"][1]["address"] = "192.168.1.1012"
    message = refusal("gb10-2", raw)
    assert (
        "nodes[1] (spark-2).address: '192.168.1.1012' is not an IPv4 address (a typo?)" in message
    )


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("/srv/models/../../etc", "climbs out with '..'"),
        ("models", "is not an absolute path"),
        ("/srv/models\nExecStartPre=/bin/sh", "holds a line break"),
    ],
)
def test_a_node_path_is_absolute_plain_and_does_not_climb(value: str, why: str) -> None:
    raw = cluster("sim-2")
    raw["serving"]["model_dir"] = value
    message = refusal("sim-2", raw)
    assert "stack sim-2: serving.model_dir: " in message and why in message


def test_a_fabric_subnet_holding_a_management_address_is_refused() -> None:
    raw = cluster("sim-2")
    raw["fabric"]["subnet"] = "198.18.0.0/16"
    message = refusal("sim-2", raw)
    assert "fabric.subnet (node spark-1): 198.18.0.0/16 holds nodes[0] (spark-1)'s" in message


def test_a_stack_is_all_simulated_or_all_real() -> None:
    raw = cluster("sim-2")
    raw["nodes"][1]["hardware"] = "gb10"
    message = refusal("sim-2", raw)
    assert "stack sim-2: nodes: mixes simulated hardware (gb10-sim) with real (gb10)" in message

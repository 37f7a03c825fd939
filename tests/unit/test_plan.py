"""The Plan: layout, fabric, NCCL, CPU sets, monitoring and serving, computed without a node."""

from __future__ import annotations

import json
from typing import Any

import pytest

from sparkrack.config.load import load_stack_file
from sparkrack.plan import Plan, make_plan

from .support import SEED_001_NCCL, SHIPPED, STACKS, cluster, plan_of

pytestmark = pytest.mark.unit


def shipped(stack: str) -> Plan:
    return make_plan(load_stack_file(stack, STACKS))


def three_node_ring() -> dict[str, Any]:
    raw = cluster("gb10-2")
    raw["nodes"].append({"name": "spark-3", "address": "192.168.1.103", "hardware": "gx10"})
    raw["fabric"]["cables"] = [
        {"a": "spark-1:port1", "b": "spark-2:port0"},
        {"a": "spark-2:port1", "b": "spark-3:port0"},
        {"a": "spark-3:port1", "b": "spark-1:port0"},
    ]
    raw["model"] = {"catalog": "minimax-m2.7-awq", "attention": {"heads": 48, "kv_heads": 8}}
    raw["serving"] |= {"tensor_parallel_size": 1, "pipeline_parallel_size": 3}
    return raw


# --- layout -----------------------------------------------------------------------------------


def test_gb10_2_is_tensor_parallel_over_the_fabric_with_ray_on_the_first_node() -> None:
    plan = shipped("gb10-2")
    layout = plan.layout

    assert (layout.tensor_parallel_size, layout.pipeline_parallel_size) == (2, 1)
    assert layout.tp_interconnect == "fabric"
    assert layout.vllm_pp_layer_partition is None
    assert layout.head_node == plan.head_node == "spark-1"
    assert layout.ray_head_address == "192.168.1.101:6379"
    assert [node.role for node in plan.nodes] == ["head", "worker"]


def test_h200_2_keeps_tensor_parallel_inside_each_server() -> None:
    layout = shipped("h200-2").layout

    assert (layout.tensor_parallel_size, layout.pipeline_parallel_size) == (8, 2)
    assert layout.tp_interconnect == "nvlink"
    assert [stage.nodes for stage in layout.stages] == [("h200-1",), ("h200-2",)]
    assert layout.layer_partition == (46, 47)


def test_auto_on_the_switch_puts_tp_on_each_port_and_pp_across_ports() -> None:
    raw = cluster("gb10-16")
    raw["serving"] |= {"tensor_parallel_size": "auto", "pipeline_parallel_size": "auto"}

    layout = plan_of("gb10-16", raw).layout

    assert layout.chosen_by == "auto"
    assert (layout.tensor_parallel_size, layout.pipeline_parallel_size) == (4, 4)
    assert layout.stages[1].nodes == ("spark-05", "spark-06", "spark-07", "spark-08")
    assert layout.vllm_pp_layer_partition == "23,23,24,23"


def test_auto_pp_fills_the_gpus_left_by_an_explicit_tp() -> None:
    raw = cluster("gb10-16")
    raw["serving"] |= {"tensor_parallel_size": 2, "pipeline_parallel_size": "auto"}

    layout = plan_of("gb10-16", raw).layout

    assert (layout.tensor_parallel_size, layout.pipeline_parallel_size, layout.chosen_by) == (
        2,
        8,
        "stack+auto",
    )


# --- fabric -----------------------------------------------------------------------------------


def test_every_link_is_planned_at_the_fabric_mtu_with_a_static_address() -> None:
    for node in shipped("gb10-2").nodes:
        assert len(node.links) == 4
        for link in node.links:
            assert (link.mtu, link.addressing) == (9000, "static")
            assert link.address is not None and link.address.endswith("/24")


@pytest.mark.parametrize("stack", ["gb10-2", "gb10-16"])
def test_a_node_with_fabric_links_answers_arp_only_on_the_owning_port(stack: str) -> None:
    for node in shipped(stack).nodes:
        assert node.sysctls == {
            "net.ipv4.conf.all.arp_ignore": "1",
            "net.ipv4.conf.all.arp_announce": "2",
        }


def test_crossed_cables_address_each_half_on_its_own_subnet() -> None:
    spark_1, spark_2 = shipped("gb10-2").nodes

    assert [(link.netdev, link.address, link.peer) for link in spark_1.links] == [
        ("enp1s0f0np0", "10.77.0.1/24", "spark-2:enp1s0f1np1"),
        ("enP2p1s0f0np0", "10.77.1.1/24", "spark-2:enP2p1s0f1np1"),
        ("enp1s0f1np1", "10.77.2.1/24", "spark-2:enp1s0f0np0"),
        ("enP2p1s0f1np1", "10.77.3.1/24", "spark-2:enP2p1s0f0np0"),
    ]
    assert spark_2.links[0].netdev == "enp1s0f0np0"
    assert spark_2.links[0].address == "10.77.2.2/24"


def test_every_cable_half_gets_a_jumbo_ping_with_dont_fragment_sized_payload() -> None:
    pings = shipped("gb10-2").jumbo_pings

    assert len(pings) == 4
    assert {p.payload_bytes for p in pings} == {8972}
    assert all(p.crossed for p in pings)
    first = pings[0]
    assert (first.from_node, first.from_netdev, first.to_node, first.to_address) == (
        "spark-1",
        "enp1s0f0np0",
        "spark-2",
        "10.77.0.2",
    )


def test_switch_rails_number_hosts_in_node_order_and_ping_in_a_ring() -> None:
    plan = shipped("gb10-16")
    last = plan.node("spark-16")

    assert [(link.netdev, link.address) for link in last.links] == [
        ("enp1s0f0np0", "10.78.0.16/24"),
        ("enP2p1s0f0np0", "10.78.1.16/24"),
    ]
    assert last.links[0].peer == "switch switch-1 port 4"
    assert len(plan.jumbo_pings) == 32  # 16 nodes x 2 rails
    assert (plan.jumbo_pings[15].from_node, plan.jumbo_pings[15].to_node) == (
        "spark-16",
        "spark-01",
    )


def test_dhcp_leaves_addresses_to_the_udhcpc_script_after_the_mtu() -> None:
    raw = cluster("gb10-16")
    raw["fabric"]["addressing"] = "dhcp"
    del raw["fabric"]["subnet"]

    plan = plan_of("gb10-16", raw)
    link = plan.nodes[0].links[0]

    assert (link.address, link.addressing) == (None, "dhcp")
    assert {p.to_address for p in plan.jumbo_pings} == {None}
    assert {link.network for node in plan.nodes for link in node.links} == {None}


def test_dhcp_with_a_subnet_names_each_rails_network_for_the_lease() -> None:
    raw = cluster("gb10-16")
    raw["fabric"]["addressing"] = "dhcp"
    static = plan_of("gb10-16", cluster("gb10-16"))

    plan = plan_of("gb10-16", raw)

    for node, planned in zip(plan.nodes, static.nodes, strict=True):
        assert [link.address for link in node.links] == [None, None]
        assert [link.network for link in node.links] == [link.network for link in planned.links]
    # the two rails (PCIe halves) lease from different /24s, each the static address's network
    first = static.nodes[0].links
    assert [link.network for link in first] == ["10.78.0.0/24", "10.78.1.0/24"]
    assert [link.address for link in first] == ["10.78.0.1/24", "10.78.1.1/24"]


# --- NCCL -------------------------------------------------------------------------------------


def test_gb10_2_nccl_env_is_seed_001s_on_the_first_box_and_its_cable_end_on_the_second() -> None:
    first, second = shipped("gb10-2").nodes

    assert first.nccl_env == SEED_001_NCCL
    # Crossed cables: spark-1:port0 meets spark-2:port1, so spark-2's HCAs are its port 1 halves.
    assert second.nccl_env == SEED_001_NCCL | {"NCCL_IB_HCA": "rocep1s0f1,roceP2p1s0f1"}


def hca_cable_ends(plan: Plan) -> set[frozenset[tuple[str, str]]]:
    """Each fabric segment NCCL uses, as the (node, netdev) of its HCAs on it."""
    nodes = {node.name: node for node in plan.nodes}
    used = set()
    for node in plan.nodes:
        for link in node.links:
            if link.rdma_device not in node.rdma_devices or link.peer_node is None:
                continue
            peer = nodes[link.peer_node]
            far = next(p for p in peer.links if p.netdev == link.peer_netdev)
            if far.rdma_device in peer.rdma_devices:
                used.add(frozenset({(node.name, link.netdev), (peer.name, far.netdev)}))
    return used


@pytest.mark.parametrize(
    "cables",
    [
        [("spark-1:port0", "spark-2:port1"), ("spark-1:port1", "spark-2:port0")],  # crossed
        [("spark-1:port1", "spark-2:port0")],
        [("spark-1:port0", "spark-2:port0"), ("spark-1:port1", "spark-2:port1")],
    ],
)
def test_both_ends_of_every_hca_are_on_one_cable(cables: list[tuple[str, str]]) -> None:
    raw = cluster("gb10-2")
    raw["fabric"]["cables"] = [{"a": a, "b": b} for a, b in cables]
    plan = plan_of("gb10-2", raw)

    ends = hca_cable_ends(plan)

    assert len(ends) == 2  # both PCIe halves of one cable, each joined end to end
    for node in plan.nodes:
        assert len(node.rdma_devices) == 2
        assert {netdev for end in ends for n, netdev in end if n == node.name} == {
            link.netdev for link in node.links if link.rdma_device in node.rdma_devices
        }


@pytest.mark.parametrize("stack", SHIPPED)
def test_no_plan_ever_disables_infiniband(stack: str) -> None:
    for node in shipped(stack).nodes:
        assert "NCCL_IB_DISABLE" not in node.engine_env


def test_straight_cables_do_not_cross_nics() -> None:
    raw = cluster("gb10-2")
    raw["fabric"]["cables"] = [{"a": "spark-1:port1", "b": "spark-2:port1"}]

    env = plan_of("gb10-2", raw).nodes[0].nccl_env

    assert env["NCCL_CROSS_NIC"] == "0"
    assert env["NCCL_IB_HCA"] == "rocep1s0f1,roceP2p1s0f1"  # both halves of the port in use


def test_a_three_node_ring_uses_both_ports_and_subnet_aware_routing() -> None:
    env = plan_of("gb10-2", three_node_ring()).node("spark-2").nccl_env

    assert env["NCCL_IB_HCA"] == "rocep1s0f0,roceP2p1s0f0,rocep1s0f1,roceP2p1s0f1"
    assert env["NCCL_IB_SUBNET_AWARE_ROUTING"] == "1"
    assert env["NCCL_CROSS_NIC"] == "1"
    # rocep1s0f0 and rocep1s0f1 are two functions of one PCI device: merged, one neighbour's
    # queue pairs would be striped over the other neighbour's cable.
    assert env["NCCL_IB_MERGE_NICS"] == "0"


def test_behind_the_switch_every_hca_sits_on_a_rail_every_node_shares() -> None:
    plan = shipped("gb10-16")
    rails: dict[str, set[str]] = {}
    for node in plan.nodes:
        for link in node.links:
            if link.rdma_device in node.rdma_devices:
                assert link.switch is not None, (node.name, link.netdev)
                rails.setdefault(str(link.address).rsplit(".", 1)[0], set()).add(node.name)
    assert rails and all(len(members) == len(plan.nodes) for members in rails.values())


def test_every_cable_of_the_ring_joins_hcas_at_both_ends() -> None:
    plan = plan_of("gb10-2", three_node_ring())

    assert len(hca_cable_ends(plan)) == 6  # three cables, two halves each


def test_h200_uses_one_rail_per_gpu() -> None:
    node = shipped("h200-2").nodes[0]

    assert node.rdma_devices == tuple(f"mlx5_{i}" for i in (0, 3, 4, 5, 6, 9, 10, 11))
    assert node.nccl_env["NCCL_CROSS_NIC"] == "0"
    assert node.nccl_env["NCCL_SOCKET_IFNAME"] == "eno1"


def test_engine_env_adds_bootstrap_layer_split_and_user_env() -> None:
    raw = cluster("gb10-16")
    raw["serving"]["env"] = {"VLLM_LOGGING_LEVEL": "DEBUG"}

    env = plan_of("gb10-16", raw).node("spark-02").engine_env

    assert env["VLLM_PP_LAYER_PARTITION"] == "5,5,6,6,6,6,6,6,6,6,6,6,6,6,6,5"
    assert env["GLOO_SOCKET_IFNAME"] == "enP7s7"
    assert env["VLLM_HOST_IP"] == "192.168.10.12"
    assert env["VLLM_LOGGING_LEVEL"] == "DEBUG"
    assert env["NCCL_IB_HCA"] == "rocep1s0f0,roceP2p1s0f0"


# --- CPU sets, monitoring, serving ----------------------------------------------------------------


def test_gb10_keeps_housekeeping_on_a725_and_inference_on_x925() -> None:
    cpus = shipped("gb10-2").nodes[0].cpus

    assert cpus.pinning
    assert (cpus.housekeeping.kernel(), cpus.compute.kernel()) == ("0-4,10-14", "5-9,15-19")
    assert cpus.irq_affinity == "7c1f"  # CPUs 0-4 and 10-14
    assert cpus.irqbalance_banned == cpus.compute


def test_a_node_may_override_its_cpu_sets() -> None:
    raw = cluster("gb10-2")
    raw["nodes"][1]["overrides"] = {"housekeeping_cpus": "0-1", "compute_cpus": "2-3"}

    cpus = plan_of("gb10-2", raw).nodes[1].cpus

    assert (str(cpus.housekeeping), str(cpus.compute), cpus.irq_affinity) == ("0-1", "2-3", "3")


def test_pinning_off_gives_every_core_to_everything() -> None:
    raw = cluster("gb10-2")
    raw["cpu_pinning"] = {"enabled": False}

    cpus = plan_of("gb10-2", raw).nodes[0].cpus

    everything = (cpus.housekeeping, cpus.compute, cpus.irqbalance_banned)
    assert [str(cpus) for cpus in everything] == ["0-19", "0-19", ""]


def test_affinity_masks_above_32_cpus_are_grouped_like_the_kernel() -> None:
    assert shipped("h200-2").nodes[0].cpus.irq_affinity == "f000000,0000000f"


@pytest.mark.parametrize(("stack", "targets"), [("gb10-2", 7), ("gb10-16", 49), ("h200-2", 7)])
def test_monitoring_scrapes_one_plus_three_per_node(stack: str, targets: int) -> None:
    monitoring = shipped(stack).monitoring

    assert len(monitoring.targets) == targets
    assert monitoring.targets[0].job == "vllm"


def test_monitoring_targets_and_rdma_counters_for_gb10_2() -> None:
    monitoring = shipped("gb10-2").monitoring

    assert [(t.job, t.target) for t in monitoring.targets] == [
        ("vllm", "192.168.1.101:8000"),
        ("node-exporter", "192.168.1.101:9100"),
        ("nvidia-gpu", "192.168.1.101:9835"),
        ("cadvisor", "192.168.1.101:8080"),
        ("node-exporter", "192.168.1.102:9100"),
        ("nvidia-gpu", "192.168.1.102:9835"),
        ("cadvisor", "192.168.1.102:8080"),
    ]
    assert monitoring.node_exporter_args[0] == "--collector.disable-defaults"
    assert "--collector.infiniband" not in monitoring.node_exporter_args
    assert monitoring.rdma_counters["spark-2"][:2] == (  # its end of the cable NCCL uses
        "/sys/class/infiniband/rocep1s0f1/ports/1/counters/port_xmit_data",
        "/sys/class/infiniband/rocep1s0f1/ports/1/counters/port_rcv_data",
    )


def test_vllm_arguments_come_from_the_plan() -> None:
    serving = shipped("gb10-2").serving

    assert serving.api_node == "spark-1"
    assert serving.vllm_args == (
        "minimax-m2.7-awq",
        *("--served-model-name", "minimax-m2.7-awq"),
        *("--host", "192.168.1.101"),
        *("--port", "8000"),
        *("--tensor-parallel-size", "2"),
        *("--pipeline-parallel-size", "1"),
        *("--gpu-memory-utilization", "0.8"),
        *("--max-model-len", "131072"),
        *("--shutdown-timeout", "120"),
        *("--distributed-executor-backend", "ray"),
        *("--max-num-seqs", "4"),
    )


def test_hf_overrides_reach_vllm_as_json() -> None:
    raw = cluster("gb10-2")
    architectures = {"architectures": ["Qwen3_5MoeForCausalLM"]}
    raw["model"] = {"catalog": "minimax-m2.7-awq", "hf_overrides": architectures}

    args = plan_of("gb10-2", raw).serving.vllm_args

    assert args[args.index("--hf-overrides") + 1] == '{"architectures":["Qwen3_5MoeForCausalLM"]}'


# --- the Plan as data -----------------------------------------------------------------------------


@pytest.mark.parametrize("stack", SHIPPED)
def test_plan_is_json_and_its_digest_is_stable(stack: str) -> None:
    plan = shipped(stack)
    again = Plan.model_validate(json.loads(json.dumps(plan.model_dump(mode="json"))))

    assert again.digest() == plan.digest() == shipped(stack).digest()
    assert len(plan.digest()) == 64


def test_digest_changes_with_the_desired_state() -> None:
    raw = cluster("gb10-2")
    raw["fabric"]["mtu"] = 8000

    assert plan_of("gb10-2", raw).digest() != shipped("gb10-2").digest()


def test_sim_stacks_differ_from_real_ones_only_in_declared_facts() -> None:
    real, sim = shipped("gb10-16"), shipped("sim-16")

    declared = {"ray_head_address"}  # the head's management address
    assert sim.layout.model_dump(exclude=declared) == real.layout.model_dump(exclude=declared)
    assert sim.fit.fits and sim.fit.weight_bytes == real.fit.weight_bytes
    assert [n.nccl_env for n in sim.nodes] == [n.nccl_env for n in real.nodes]
    assert sim.nodes[0].address == "198.18.1.11"
    # sim-16 leases its rails as seed 000's rack did; gb10-16 leaves that to its owner
    assert (real.nodes[0].links[0].addressing, sim.nodes[0].links[0].addressing) == (
        "static",
        "dhcp",
    )
    assert sim.nodes[0].links[0].network == "198.19.0.0/24"
    assert (sim.nodes[0].ssh_user, sim.nodes[0].ssh_port) == (
        "ubuntu",
        22,
    )  # the owner's login, not the service user
    assert sim.nodes[0].ssh_key_path == "~/.cache/sparkrack/sim/sim-16/id_ed25519"
    assert sim.serving.image == "localhost/sparkrack/engine-standin:latest"

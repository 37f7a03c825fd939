"""The simulator reads its racks from the stacks, through the same spec and plan as real ones."""

from __future__ import annotations

import pytest

from sparkrack.config.load import load_stack_file
from sparkrack.plan import make_plan
from sparkrack.sim.shell import SimError
from sparkrack.sim.stack import topology_for_stack, topology_from_plan
from sparkrack.sim.topology import SimCable, sixteen_node_topology, two_node_topology
from sparkrack.text.limits import MemlockLimit
from tests.unit.support import cluster, plan_of

pytestmark = pytest.mark.unit


def cable_set(cables: tuple[SimCable, ...]) -> set[frozenset[tuple[str, str]]]:
    return {frozenset({(c.a_node, c.a_port_netdev), (c.b_node, c.b_port_netdev)}) for c in cables}


def test_sim_2_is_the_crossed_pair_the_simulator_was_built_for() -> None:
    from_stack = topology_for_stack("sim-2")
    expected = two_node_topology()

    assert [(n.name, n.mgmt_address) for n in from_stack.nodes] == [
        (n.name, n.mgmt_address) for n in expected.nodes
    ]
    assert cable_set(from_stack.cables) == cable_set(expected.cables)
    assert set(from_stack.nodes[0].netdevs) == set(expected.nodes[0].netdevs)
    assert set(from_stack.nodes[0].rdma_devices) == set(expected.nodes[0].rdma_devices)
    assert from_stack.switch is None
    assert from_stack.mgmt_subnet == "198.18.0.0/24"


def test_sim_16_puts_four_nodes_with_both_port0_halves_on_each_switch_port() -> None:
    from_stack = topology_for_stack("sim-16")
    builder = sixteen_node_topology()

    assert len(from_stack.nodes) == 16
    assert from_stack.cables == ()
    assert from_stack.switch is not None and builder.switch is not None
    shapes = [
        (len({n for n, _ in plugged}), {d for _, d in plugged})
        for _, plugged in from_stack.switch.ports
    ]
    assert shapes == [(4, {"enp1s0f0np0", "enP2p1s0f0np0"})] * 4
    assert [len(p) for _, p in from_stack.switch.ports] == [len(p) for _, p in builder.switch.ports]
    # Its own management network: sim-2 (198.18.0.0/24) and sim-16 run side by side.
    assert from_stack.mgmt_subnet == "198.18.1.0/24"


def test_a_real_stack_is_never_simulated() -> None:
    with pytest.raises(SimError, match=r"stack gb10-2: node spark-1 is hardware 'gx10'"):
        topology_for_stack("gb10-2")


def test_a_node_outside_the_management_subnet_is_refused_by_name() -> None:
    plan = make_plan(load_stack_file("sim-2"))
    strays = plan.model_copy(
        update={
            "nodes": (plan.nodes[0], plan.nodes[1].model_copy(update={"address": "198.18.9.12"}))
        }
    )

    with pytest.raises(SimError, match=r"stack sim-2: node spark-2 address 198.18.9.12 is outside"):
        topology_from_plan(strays)


@pytest.mark.parametrize(("sim", "real"), [("sim-2", "gb10-2"), ("sim-16", "gb10-16")])
def test_a_sim_stack_plans_like_its_real_twin(sim: str, real: str) -> None:
    simulated = make_plan(load_stack_file(sim))
    twin = make_plan(load_stack_file(real))

    ignoring_names = {"verdict"}
    assert simulated.fit.model_dump(exclude=ignoring_names) == twin.fit.model_dump(
        exclude=ignoring_names
    )
    assert simulated.layout.layer_partition == twin.layout.layer_partition
    assert simulated.nodes[0].nccl_env == twin.nodes[0].nccl_env | {
        "NCCL_SOCKET_IFNAME": simulated.nodes[0].management_nic
    }


def test_sim_stacks_declare_what_the_simulator_machine_can_grant() -> None:
    simulated = make_plan(load_stack_file("sim-2"))
    real = make_plan(load_stack_file("gb10-2"))

    assert {node.memlock_limit for node in simulated.nodes} == {MemlockLimit(8 * 1024 * 1024)}
    assert {node.memlock_limit for node in real.nodes} == {MemlockLimit(None)}
    cpus = [(str(n.cpus.housekeeping), str(n.cpus.compute)) for n in simulated.nodes]
    assert cpus == [("0", "1")] * 2


def test_a_dhcp_rack_leases_each_rail_from_its_own_24_as_static_addressing_would() -> None:
    topology = topology_for_stack("sim-16")  # seed 000's rack: addressing dhcp
    assert topology.switch is not None
    leases = {(lease.node, lease.netdev): lease.address for lease in topology.switch.leases}

    assert len(leases) == 32  # both f0 halves of sixteen nodes
    assert leases["spark-01", "enp1s0f0np0"] == "198.19.0.1/24"
    assert leases["spark-01", "enP2p1s0f0np0"] == "198.19.1.1/24"
    assert leases["spark-16", "enP2p1s0f0np0"] == "198.19.1.16/24"


def test_a_static_rack_has_no_dhcp_server() -> None:
    assert topology_for_stack("sim-2").switch is None
    raw = cluster("sim-16")
    raw["fabric"]["addressing"] = "static"
    switch = topology_from_plan(plan_of("sim-16", raw)).switch
    assert switch is not None and switch.leases == ()

"""What the engine stand-in makes of a rank's node as NCCL would: its RDMA ports (sysfs, the
device nodes the container was given), its memlock limit, its env, and the transport it logs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sparkrack.config.load import load_stack_file
from sparkrack.sim.standin import engine, nccl, reach
from sparkrack.sim.standin.nccl import NodeReport, Transport

pytestmark = pytest.mark.unit

SEED_001_ENV = {
    "NCCL_IB_HCA": "rocep1s0f0,roceP2p1s0f0",
    "NCCL_IB_MERGE_NICS": "1",
    "NCCL_CROSS_NIC": "1",
    "NCCL_IB_GID_INDEX": "3",
    "NCCL_IB_QPS_PER_CONNECTION": "4",
    "NCCL_SOCKET_IFNAME": "enP7s7",
    "NCCL_DEBUG": "INFO",
}
GB10_INTERFACES = [
    ("lo", "127.0.0.1"),
    ("enP7s7", "198.18.0.11"),
    ("enp1s0f0np0", "10.10.0.1"),
]
SEED_001_LINE = (
    "NET/IB : Using [0]rocep1s0f0:1/RoCE [1]roceP2p1s0f0:1/RoCE [RO]; OOB enP7s7:198.18.0.11<0>"
)


def fake_rdma_tree(root: Path, devices: dict[str, str]) -> Path:
    """/sys/class/infiniband as the sim fakes it: device -> port 1 state, RoCE v2 at GID 3."""
    for device, state in devices.items():
        port = root / device / "ports" / "1"
        (port / "gid_attrs" / "types").mkdir(parents=True)
        (port / "state").write_text(f"{state}\n")
        (port / "rate").write_text("200 Gb/sec (2X NDR)\n")
        (port / "gid_attrs" / "types" / "3").write_text("RoCE v2\n")
    return root


def verbs_dir(root: Path, count: int) -> Path:
    """A container's /dev/infiniband holding uverbs0..count-1 (files: only presence is read)."""
    root.mkdir(parents=True, exist_ok=True)
    for index in range(count):
        (root / f"uverbs{index}").touch()
    return root


@pytest.fixture
def gb10_sysfs(tmp_path: Path) -> Path:
    # Listed out of PCI order on purpose: NCCL lists devices in probe (PCI) order.
    names = ["roceP2p1s0f1", "rocep1s0f1", "roceP2p1s0f0", "rocep1s0f0"]
    return fake_rdma_tree(tmp_path / "infiniband", dict.fromkeys(names, "4: ACTIVE"))


@pytest.fixture
def gb10_dev(tmp_path: Path) -> Path:
    return verbs_dir(tmp_path / "dev-infiniband", 4)


def ports_of(sysfs: Path, dev: Path, gid_index: int = 3) -> list[nccl.RdmaPort]:
    return nccl.read_rdma_ports(sysfs, gid_index, dev)


# --- RDMA devices and the NCCL line ---------------------------------------------------------


def test_devices_are_read_in_pci_order_with_their_gid_type(
    gb10_sysfs: Path, gb10_dev: Path
) -> None:
    ports = ports_of(gb10_sysfs, gb10_dev)

    assert [p.device for p in ports] == ["rocep1s0f0", "rocep1s0f1", "roceP2p1s0f0", "roceP2p1s0f1"]
    assert all(p.active and p.link_layer == "RoCE" and p.gid_type == "RoCE v2" for p in ports)
    assert all(p.verbs and p.usable for p in ports)
    assert ports_of(gb10_sysfs, gb10_dev, gid_index=1)[0].gid_type is None
    assert not ports_of(gb10_sysfs, gb10_dev, gid_index=1)[0].usable  # RoCE needs its GID


def test_a_device_without_its_device_node_here_is_not_usable(
    gb10_sysfs: Path, tmp_path: Path
) -> None:
    ports = ports_of(gb10_sysfs, verbs_dir(tmp_path / "two", 2))

    assert [p.verbs for p in ports] == [True, True, False, False]  # uverbs0, 1 only
    assert [p.usable for p in ports] == [True, True, False, False]


def test_no_sysfs_tree_means_no_devices(tmp_path: Path) -> None:
    assert nccl.read_rdma_ports(tmp_path / "absent", gid_index=3) == []


@pytest.mark.parametrize(
    ("spec", "name", "port", "expected"),
    [
        ("rocep1s0f0,roceP2p1s0f0", "roceP2p1s0f0", 1, True),
        ("rocep1s0f0,roceP2p1s0f0", "rocep1s0f1", 1, False),
        ("rocep1", "rocep1s0f1", 1, True),  # a prefix, as in NCCL
        ("=rocep1", "rocep1s0f1", 1, False),  # `=`: exact names only
        ("^rocep1s0f0", "rocep1s0f0", 1, False),  # `^`: exclude
        ("^rocep1s0f0", "rocep1s0f1", 1, True),
        ("rocep1s0f0:2", "rocep1s0f0", 1, False),  # `:port`
        (None, "anything", 1, True),
    ],
)
def test_nccl_list_syntax(spec: str | None, name: str, port: int, expected: bool) -> None:
    assert nccl.matches_nccl_list(spec, name, port) is expected


def test_the_seed_001_env_gives_the_roce_line(gb10_sysfs: Path, gb10_dev: Path) -> None:
    ports = ports_of(gb10_sysfs, gb10_dev)

    transport = nccl.nccl_transport(SEED_001_ENV, ports, GB10_INTERFACES, float("inf"))

    assert transport.lines == (("INFO", SEED_001_LINE), ("INFO", "Using network IB"))
    assert transport.refusal is None and transport.fallback is None


def test_a_port_that_is_down_is_left_out(tmp_path: Path) -> None:
    tree = fake_rdma_tree(tmp_path / "ib", {"rocep1s0f0": "1: DOWN", "roceP2p1s0f0": "4: ACTIVE"})

    transport = nccl.nccl_transport(
        SEED_001_ENV, ports_of(tree, verbs_dir(tmp_path / "dev", 2)), GB10_INTERFACES
    )

    assert transport.lines[0][1].startswith("NET/IB : Using [0]roceP2p1s0f0:1/RoCE [RO];")


def test_ib_disable_on_rdma_hardware_falls_back_to_sockets_and_says_why(
    gb10_sysfs: Path, gb10_dev: Path
) -> None:
    """As real NCCL: sockets, and the engine serves on (slower); no refusal."""
    env = {**SEED_001_ENV, "NCCL_IB_DISABLE": "1"}

    transport = nccl.nccl_transport(env, ports_of(gb10_sysfs, gb10_dev), GB10_INTERFACES)

    assert transport.lines[0] == ("INFO", "NET/Socket : Using [0]enP7s7:198.18.0.11<0>")
    assert transport.lines[-1] == ("INFO", "Using network Socket")
    assert transport.refusal is None and transport.fallback is not None
    for quoted in ("NCCL_IB_DISABLE=1", "58%", "25 against 40.4 tok/s", "TCP sockets on enP7s7"):
        assert quoted in transport.fallback


def test_a_container_without_dev_infiniband_falls_back_to_sockets(
    gb10_sysfs: Path, tmp_path: Path
) -> None:
    """Seed 001's trap: the devices exist on the host, the container was not given them."""
    ports = ports_of(gb10_sysfs, tmp_path / "no-dev-infiniband")

    transport = nccl.nccl_transport(SEED_001_ENV, ports, GB10_INTERFACES)

    assert transport.lines[0] == ("INFO", "NET/IB : No device found.")
    assert transport.lines[-1] == ("INFO", "Using network Socket")
    assert transport.fallback is not None
    assert "rocep1s0f0:1 (no /dev/infiniband device node in this container)" in transport.fallback


def test_a_memlock_limit_below_the_need_falls_back_to_sockets(
    gb10_sysfs: Path, gb10_dev: Path
) -> None:
    ports = ports_of(gb10_sysfs, gb10_dev)

    low = nccl.nccl_transport(SEED_001_ENV, ports, GB10_INTERFACES, 64 * 1024)
    enough = nccl.nccl_transport(SEED_001_ENV, ports, GB10_INTERFACES, nccl.NCCL_MEMLOCK_NEED_BYTES)

    assert low.lines[-1] == ("INFO", "Using network Socket")
    assert low.fallback is not None and "memlock limit 65536 B below" in low.fallback
    assert enough.lines[-1] == ("INFO", "Using network IB") and enough.fallback is None


def test_the_memlock_need_is_what_the_simulated_gb10_declares_it_can_grant() -> None:
    profiles = load_stack_file("sim-2").hardware_profiles
    assert profiles["gb10-sim"].memlock_limit == nccl.NCCL_MEMLOCK_NEED_BYTES


def test_ib_disable_without_rdma_hardware_is_only_sockets() -> None:
    transport = nccl.nccl_transport({"NCCL_IB_DISABLE": "1"}, [], GB10_INTERFACES)

    assert transport.lines[0] == (
        "INFO",
        "NET/Socket : Using [0]enP7s7:198.18.0.11<0> [1]enp1s0f0np0:10.10.0.1<0>",
    )
    assert transport.refusal is None and transport.fallback is None


def test_an_hca_that_does_not_exist_is_no_device_and_sockets(
    gb10_sysfs: Path, gb10_dev: Path
) -> None:
    env = {**SEED_001_ENV, "NCCL_IB_HCA": "mlx5_0"}

    transport = nccl.nccl_transport(env, ports_of(gb10_sysfs, gb10_dev), GB10_INTERFACES)

    assert transport.lines[0] == ("INFO", "NET/IB : No device found.")
    assert transport.lines[1] == ("INFO", "NET/Socket : Using [0]enP7s7:198.18.0.11<0>")
    assert transport.refusal is None and transport.fallback is not None
    assert "NCCL_IB_HCA=mlx5_0" in transport.fallback
    assert "present: rocep1s0f0:1 (usable), rocep1s0f1:1 (usable)" in transport.fallback


def test_a_socket_ifname_that_matches_nothing_fails_bootstrap() -> None:
    env = {**SEED_001_ENV, "NCCL_SOCKET_IFNAME": "eth9"}

    transport = nccl.nccl_transport(env, [], GB10_INTERFACES)

    assert transport.lines == (("WARN", "Bootstrap : no socket interface found"),)
    assert transport.refusal == "NCCL_SOCKET_IFNAME=eth9 matches no interface"


def test_without_socket_ifname_nccl_skips_loopback_and_docker() -> None:
    interfaces = [("lo", "127.0.0.1"), ("docker0", "172.17.0.1"), ("enP7s7", "198.18.0.11")]

    assert nccl.oob_interfaces({}, interfaces) == ["enP7s7:198.18.0.11<0>"]
    assert nccl.oob_interfaces({}, interfaces[:1]) == ["lo:127.0.0.1<0>"]


def test_a_node_report_prefixes_lines_like_ray_and_nccl(gb10_sysfs: Path, gb10_dev: Path) -> None:
    env = {**SEED_001_ENV, "PATH": "/usr/bin"}

    report = nccl.inspect_node(0, "198.18.0.11", 0, env, gb10_sysfs, GB10_INTERFACES, gb10_dev)
    lines = report.log_lines()

    ray = r"\(RayWorkerWrapper pid=\d+, ip=198\.18\.0\.11\) "
    nccl_line = rf"[^:\s]+:\d+:\d+ \[0\] NCCL INFO {re.escape(SEED_001_LINE)}"
    assert re.fullmatch(ray + nccl_line, lines[0])
    assert "PATH" not in report.nccl_env
    assert any("NCCL_IB_GID_INDEX=3" in line for line in lines)
    assert any("rocep1s0f0:1 ACTIVE, GID type 'RoCE v2'" in line for line in lines)


@pytest.mark.parametrize(("debug", "shown"), [("", 0), ("WARN", 0), ("INFO", 2), ("info", 2)])
def test_nccl_lines_show_only_at_the_nccl_debug_level(
    gb10_sysfs: Path, gb10_dev: Path, debug: str, shown: int
) -> None:
    env = {**SEED_001_ENV, "NCCL_DEBUG": debug}

    lines = nccl.inspect_node(0, "a", 0, env, gb10_sysfs, GB10_INTERFACES, gb10_dev).log_lines()

    assert len([line for line in lines if re.search(r" NCCL (INFO|WARN) ", line)]) == shown
    assert any(line.startswith("stand-in: rank 0") for line in lines)


def test_a_bootstrap_warning_shows_at_warn() -> None:
    env = {"NCCL_SOCKET_IFNAME": "eth9", "NCCL_DEBUG": "WARN"}

    lines = nccl.inspect_node(0, "a", 0, env, Path("/absent"), GB10_INTERFACES).log_lines()

    assert lines[0].endswith("NCCL WARN Bootstrap : no socket interface found")


def test_a_fallback_is_named_in_the_stand_in_summary(gb10_sysfs: Path, tmp_path: Path) -> None:
    lines = nccl.inspect_node(
        1, "a", 0, SEED_001_ENV, gb10_sysfs, GB10_INTERFACES, tmp_path / "none"
    ).log_lines()

    assert any(line.startswith("stand-in: rank 1 on sockets: no usable RDMA") for line in lines)
    assert any("rocep1s0f0:1 ACTIVE, GID type 'RoCE v2', no device node here" in x for x in lines)


def report(rank: int, refusal: str | None, with_ports: bool) -> NodeReport:
    ports = (nccl.RdmaPort("rocep1s0f0", 1, True, "RoCE", "RoCE v2"),) if with_ports else ()
    return NodeReport(rank, f"spark-{rank}", "10.0.0.1", "p", {}, ports, Transport((), refusal))


def test_a_lone_gpu_without_rdma_hardware_needs_no_fabric() -> None:
    assert engine.refusals_of([report(0, "no socket interface", with_ports=False)], 1) == []
    assert engine.refusals_of([report(0, "no socket interface", with_ports=True)], 1) == [
        "rank 0 (spark-0): no socket interface"
    ]
    assert len(engine.refusals_of([report(0, "x", False), report(1, None, False)], 2)) == 1


# --- which ranks NCCL connects, and over which HCA pairs ----------------------------------------


def test_nccl_connects_every_pair_in_a_tensor_group_and_each_rank_to_its_next_stage() -> None:
    assert reach.rank_pairs(2, 1) == [(0, 1)]
    assert reach.rank_pairs(1, 3) == [(0, 1), (1, 2)]
    assert sorted(reach.rank_pairs(2, 2)) == [(0, 1), (0, 2), (1, 3), (2, 3)]


def test_hcas_pair_by_position_unless_nccl_routes_by_subnet() -> None:
    local = [reach.Hca(f"d{i}", f"n{i}", f"10.0.{i}.1") for i in range(2)]
    remote = [reach.Endpoint(f"d{i}", f"10.0.{i}.2", 1) for i in range(2)]

    by_position = list(reach.paired(local, remote, subnet_aware=False))
    every_pair = list(reach.paired(local, remote, subnet_aware=True))

    assert [(h.device, p.address) for h, p in by_position] == [
        ("d0", "10.0.0.2"),
        ("d1", "10.0.1.2"),
    ]
    assert len(every_pair) == 4


def test_an_hca_is_the_address_of_the_netdev_its_gid_names(tmp_path: Path) -> None:
    tree = fake_rdma_tree(tmp_path / "infiniband", {"rocep1s0f0": "4: ACTIVE"})
    ndevs = tree / "rocep1s0f0" / "ports" / "1" / "gid_attrs" / "ndevs"
    ndevs.mkdir()
    (ndevs / "3").write_text("enp1s0f0np0\n")
    ports = nccl.read_rdma_ports(tree, 3, verbs_dir(tmp_path / "dev", 1))

    taken = [(port.device, port.netdev) for port in ports]

    assert reach.hcas_of(taken, GB10_INTERFACES) == [
        reach.Hca("rocep1s0f0", "enp1s0f0np0", "10.10.0.1")
    ]


def test_the_probes_listeners_answer_then_leave_nothing_listening() -> None:
    """Verification holds every node to the Plan's listeners: the stand-in closes its own."""
    hca = reach.Hca("roce-lo", "lo", "127.0.0.1")
    listeners = reach.Listeners([hca])
    [endpoint] = listeners.endpoints

    assert reach.probe(hca, endpoint) is None
    listeners.close()
    assert reach.probe(hca, endpoint, timeout_s=2) == "111 Connection refused"

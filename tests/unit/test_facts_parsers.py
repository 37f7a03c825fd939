"""Fact parsers on output captured from the simulated nodes (Debian 13) and documented DGX OS."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sparkrack.facts import proc
from sparkrack.facts.files import FileState, normalize_mode, parse_file_state
from sparkrack.facts.links import LinkState, parse_link, parse_links
from sparkrack.facts.podman import container, image_id, parse_container, parse_image_id
from sparkrack.facts.sysctl import normalize_value
from sparkrack.facts.units import parse_unit_state, systemctl, unit_state
from sparkrack.facts.users import (
    Account,
    parse_linger,
    parse_memlock,
    parse_passwd,
    parse_subids,
)

pytestmark = pytest.mark.unit
GOLDEN = Path(__file__).parent / "golden"


def golden(name: str) -> str:
    return (GOLDEN / name).read_text()


def test_a_fresh_fabric_port_is_down_at_1500_without_addresses() -> None:
    assert parse_link(golden("debian13-ip-addr-fresh-port.json")) == LinkState(
        "enp1s0f0np0", up=False, mtu=1500, addresses=(), operstate="DOWN"
    )


def test_a_configured_port_is_up_without_carrier_and_keeps_only_global_addresses() -> None:
    assert parse_link(golden("debian13-ip-addr-configured-port.json")) == LinkState(
        "enp1s0f0np0",
        up=True,
        mtu=9000,
        addresses=("198.19.77.1/24", "fd00:77::1/64"),
        operstate="DOWN",  # the UP flag without a carrier: set up, not yet cabled
    )


def test_link_local_ipv6_is_not_configuration() -> None:
    link = parse_link(golden("debian13-ip-addr-mgmt.json"))
    assert link is not None and link.addresses == ("198.18.7.11/24",)


def test_a_missing_netdev_reads_as_absent() -> None:
    assert parse_link("") is None


def test_dgx_os_noprefixroute_addresses_parse() -> None:
    links = parse_links(golden("ubuntu2404-ip-addr-dgx.json"))
    assert links["enp1s0f0np0"] == LinkState(
        "enp1s0f0np0", up=True, mtu=9000, addresses=("192.168.100.10/24",), operstate="UP"
    )
    assert links["enP7s7"].addresses == ("10.0.0.21/24",)


def test_file_state_reads_mode_owner_and_hash() -> None:
    assert parse_file_state(golden("debian13-stat-sha256.txt")) == FileState(
        "0644",
        "root",
        "root",
        "6b9602b44f94b90b921ec90412ec9d872d9563baf1a86fa7ce8eec9df8ca36ee",
    )
    assert parse_file_state("absent\n") is None


@pytest.mark.parametrize("given", ["644", "0644", "0o644"])
def test_modes_normalize_to_four_digits(given: str) -> None:
    assert normalize_mode(given) == "0644"


def test_sysctl_values_normalize_tabs_to_spaces() -> None:
    assert normalize_value(golden("debian13-sysctl-somaxconn.txt")) == "4096"
    assert normalize_value(golden("debian13-sysctl-port-range.txt")) == "32768 60999"


def test_unit_states() -> None:
    ssh = parse_unit_state(golden("debian13-systemctl-show-active.txt"))
    assert (ssh.load, ssh.enabled, ssh.active) == ("loaded", True, True)
    missing = parse_unit_state(golden("debian13-systemctl-show-missing.txt"))
    assert (missing.load, missing.enabled, missing.active) == ("not-found", False, False)
    socket = parse_unit_state(golden("debian13-systemctl-user-show.txt"))
    assert (socket.file_state, socket.enabled, socket.active) == ("static", False, True)


def test_a_user_unit_is_reached_through_the_users_manager() -> None:
    fact = unit_state("podman.socket", "user", "sparkrack")
    assert fact.command.startswith("systemctl --user -M sparkrack@ show ")
    assert fact.sudo
    with pytest.raises(ValueError, match="needs its user"):
        systemctl("user", None, "show")


def test_users_facts() -> None:
    assert parse_passwd(golden("debian13-getent-passwd.txt")) == Account(
        "sparkrack", 1000, 1000, "/home/sparkrack", "/bin/bash"
    )
    assert parse_passwd("") is None
    assert parse_linger(golden("debian13-loginctl-linger.txt")) is False
    assert parse_linger("Linger=yes\n") is True
    assert parse_subids(golden("debian13-subuid.txt")) == {"sparkrack": ("100000:65536",)}
    assert parse_memlock(golden("debian13-user-memlock.txt")) == "8388608"
    assert parse_memlock("LimitMEMLOCK=infinity\n") == "infinity"


def recorded(node: str, command: str) -> str:
    """stdout of a command recorded on a simulated node for the verification goldens."""
    status, stdout = json.loads(golden("debian13-verify-checks.json"))[node][command]
    assert status == 0
    return str(stdout)


def test_a_containers_inspect_record_parses_with_its_state_and_env() -> None:
    found = parse_container(recorded("spark-1", "podman container inspect ray-head"))
    assert found is not None
    assert (found["Name"], found["State"]["Status"], found["State"]["Pid"]) == (
        "ray-head",
        "running",
        705,
    )
    assert any(item.startswith("NCCL_") for item in found["Config"]["Env"])


def test_a_missing_container_or_image_reads_as_absence() -> None:
    # `2>/dev/null || true`: podman's "no such container" leaves stdout empty and exits 0.
    assert container("ray-head").command.endswith("2>/dev/null || true")
    assert parse_container("") is None
    assert parse_image_id("\n") == ""


def test_an_image_id_is_the_full_sha_podman_prints() -> None:
    command = "podman image inspect --format '{{.Id}}' localhost/sparkrack/engine-standin:latest"
    assert image_id("localhost/sparkrack/engine-standin:latest").command.startswith(command)
    found = parse_image_id(recorded("spark-1", command))
    assert found == "9f9fa5acbcd4b009281ad7b1964fe7796f6291a9a3ff6046aff87a4d5b0cd456"


def test_proc_facts_read_the_recorded_process_and_interrupts() -> None:
    status = proc.cpus_allowed(705)
    assert status.command == "cat /proc/705/status 2>/dev/null || true"
    assert status.parse(recorded("spark-1", status.command)) != ""
    limits = proc.memlock(220)
    assert limits.parse(recorded("spark-1", limits.command)) == ("8388608", "8388608")
    # A simulated node has no ConnectX driver: no mlx5 line, and the check skips.
    assert proc.nic_irqs().parse(recorded("spark-1", "cat /proc/interrupts")) == []
    assert proc.parse_irqs(" 55:  0  0  IR-PCI-MSIX-0000:01:00.0  0-edge  mlx5_comp0@pci\n") == [
        "55"
    ]

"""What the resources run on a node: atomic writes, the fabric's order, systemctl, usermod."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from sparkrack.facts.files import missing_directories
from sparkrack.resources import podman_secret, units
from sparkrack.resources.files import (
    TEMP_MARK,
    atomic_write_script,
    sha256_of,
)
from sparkrack.resources.links import apply_commands, restore_commands, route_commands
from sparkrack.resources.podman_reads import start_command
from sparkrack.resources.podman_secret import create_script
from sparkrack.resources.units import restart_if_running, state_commands
from sparkrack.resources.users import id_range, memlock_state, subid_commands, valid_systemd_memlock
from sparkrack.transport import ssh
from sparkrack.transport.target import Result, SshError, Target

pytestmark = pytest.mark.unit


def write_locally(path: Path, content: str, sha256: str | None = None) -> int:
    """Run the very script a node runs, here, as this user (owner/group: our own)."""
    owner = subprocess.run(["id", "-un"], capture_output=True, text=True).stdout.strip()
    group = subprocess.run(["id", "-gn"], capture_output=True, text=True).stdout.strip()
    script = atomic_write_script(str(path), sha256 or sha256_of(content), "0640", owner, group)
    return subprocess.run(["sh", "-c", script], input=content, text=True).returncode


def test_the_atomic_write_installs_content_mode_and_leaves_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "etc" / "app.conf"
    assert write_locally(target, "hello\n") == 0
    assert target.read_text() == "hello\n"
    assert oct(target.stat().st_mode & 0o777) == "0o640"
    assert [p.name for p in target.parent.iterdir()] == ["app.conf"]


def test_a_short_write_never_replaces_the_file(tmp_path: Path) -> None:
    target = tmp_path / "app.conf"
    target.write_text("old\n")
    # The hash of the whole content, but stdin cut short: what a dropped connection delivers.
    assert write_locally(target, "hel", sha256=sha256_of("hello\n")) != 0
    assert target.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["app.conf"]  # the temporary is gone


def test_a_temporary_left_by_a_killed_write_goes_with_the_next_write(tmp_path: Path) -> None:
    target = tmp_path / "app.conf"
    (tmp_path / f".app.conf{TEMP_MARK}AbC123").write_text("hel")  # SIGKILL: no trap ran
    (tmp_path / f".other.conf{TEMP_MARK}AbC123").write_text("x")  # another path's: not ours
    assert write_locally(target, "hello\n") == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        f".other.conf{TEMP_MARK}AbC123",
        "app.conf",
    ]


def test_missing_directories_are_what_a_write_makes_deepest_first(tmp_path: Path) -> None:
    """What RemoteFile records at create, so that destroy removes the directories it made."""
    (tmp_path / "home" / "u").mkdir(parents=True)
    config = tmp_path / "home" / "u" / ".config"
    asked = [str(config / "containers"), str(config / "systemd" / "user")]
    fact = missing_directories(*asked)
    found = subprocess.run(["sh", "-c", fact.command], capture_output=True, text=True).stdout
    assert fact.parse(found) == [
        str(config / "systemd" / "user"),
        str(config / "containers"),
        str(config / "systemd"),
        str(config),
    ]


def test_the_temporary_lives_beside_the_target_and_is_quoted() -> None:
    script = atomic_write_script("/etc/my app/x;y.conf", "ab" * 32, "644", "root", "root")
    assert f"mktemp '/etc/my app/.x;y.conf{TEMP_MARK}XXXXXX'" in script
    assert "mv -f -- \"$tmp\" '/etc/my app/x;y.conf'" in script
    assert script.index("sha256sum --check") < script.index("mv -f")


def test_link_steps_are_up_then_mtu_then_addresses() -> None:
    live = {"up": False, "mtu": 1500, "addresses": []}
    assert apply_commands("enp1s0f0np0", True, 9000, ["10.0.0.1/24"], live) == [
        "ip link set dev enp1s0f0np0 up",
        "ip link set dev enp1s0f0np0 mtu 9000",
        "ip addr add 10.0.0.1/24 dev enp1s0f0np0",
    ]


def test_an_mtu_repair_re_adds_the_address_after_it() -> None:
    # Seed 001: an MTU set under an address lost the connected route.
    live = {"up": True, "mtu": 1500, "addresses": ["10.0.0.1/24"]}
    assert apply_commands("p0", True, 9000, ["10.0.0.1/24"], live) == [
        "ip link set dev p0 up",
        "ip addr del 10.0.0.1/24 dev p0",
        "ip link set dev p0 mtu 9000",
        "ip addr add 10.0.0.1/24 dev p0",
    ]


def test_a_stray_address_is_removed_and_a_converged_link_needs_only_up() -> None:
    live = {"up": True, "mtu": 9000, "addresses": ["10.0.0.1/24", "10.9.9.9/24"]}
    assert apply_commands("p0", True, 9000, ["10.0.0.1/24"], live) == [
        "ip link set dev p0 up",
        "ip addr del 10.9.9.9/24 dev p0",
    ]


def test_a_lost_connected_route_is_added_back_as_the_kernel_makes_it() -> None:
    kept = ["10.0.0.1/24", "10.1.0.1/24"]
    assert route_commands("p0", kept, ["10.1.0.0/24"]) == [
        "ip route replace 10.0.0.0/24 dev p0 proto kernel scope link src 10.0.0.1"
    ]
    assert route_commands("p0", kept, ["10.0.0.0/24", "10.1.0.0/24"]) == []


def test_delete_restores_what_create_found() -> None:
    assert restore_commands("p0", ["10.0.0.1/24"], {"up": False, "mtu": 1500}) == [
        "ip addr del 10.0.0.1/24 dev p0",
        "ip link set dev p0 mtu 1500",
        "ip link set dev p0 down",
    ]


def test_unit_commands_do_only_what_differs() -> None:
    props = {"unit": "a b.service", "scope": "user", "user": "sparkrack"}
    live = {"enabled": True, "active": False}
    assert state_commands({**props, "enabled": True, "active": True}, live) == [
        "systemctl --user -M sparkrack@ daemon-reload",
        "systemctl --user -M sparkrack@ start -- 'a b.service'",
    ]


def test_a_running_unit_older_than_its_config_is_restarted_and_a_stopped_one_started() -> None:
    props = {"unit": "irqbalance.service", "scope": "system", "user": ""}
    wanted = {**props, "enabled": True, "active": True}
    stale = {"enabled": True, "active": True, "current": False}

    assert state_commands(wanted, stale)[1:] == ["systemctl restart -- irqbalance.service"]
    assert state_commands(wanted, {**stale, "active": False})[1:] == [
        "systemctl start -- irqbalance.service"  # a start reads the file anyway
    ]
    assert state_commands(wanted, {**stale, "current": True})[1:] == []


def test_a_container_unit_is_reloaded_then_restarted_whether_or_not_it_runs() -> None:
    """Restarted, never started: a unit busy starting its old definition takes a start as done."""
    assert start_command("sparkrack", "vllm.service") == (
        "systemctl --user -M sparkrack@ daemon-reload && "
        "systemctl --user -M sparkrack@ restart vllm.service"
    )


def test_subordinate_ids_become_usermod_ranges() -> None:
    assert id_range("100000:65536") == "100000-165535"
    assert subid_commands("svc", "subuid", ["100000:65536"], ["200000:10"]) == [
        "usermod --del-subuids=200000-200009 --add-subuids=100000-165535 -- svc"
    ]
    assert subid_commands("svc", "subgid", ["1:2"], ["1:2"]) == []


def test_the_user_takes_memlock_only_as_systemd_spells_it() -> None:
    assert valid_systemd_memlock("infinity") and valid_systemd_memlock("65536")
    for other in ("unlimited", "-1", " 65536", "lots", ""):
        assert not valid_systemd_memlock(other), other


@pytest.mark.parametrize(
    ("planned", "live", "state"),
    [
        ("8388608", "8388608", "8388608"),
        ("8388608", "infinity", "8388608"),  # more than planned: no drift
        ("8388608", "16777216", "8388608"),
        ("8388608", "65536", "65536"),  # less: drift, and up writes the drop-in
        ("infinity", "infinity", "infinity"),
        ("infinity", "8388608", "8388608"),
        ("infinity", "", ""),
    ],
)
def test_the_managers_memlock_drifts_only_when_it_grants_less_than_planned(
    planned: str, live: str, state: str
) -> None:
    assert memlock_state(planned, live) == state


TARGET = Target(
    node="spark-1", host="198.18.0.11", port=22, user="sparkrack", key_path="/k", known_hosts="/h"
)
LOST = "exited 1: Failed to enable unit: Transport endpoint is not connected"


def test_a_systemctl_call_is_asked_again_when_the_user_bus_was_lost(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    answers = [SshError(LOST), SshError(LOST), None]
    ran: list[str] = []

    def run(target: Target, command: str, sudo: bool = False) -> None:
        ran.append(command)
        if error := answers.pop(0):
            raise error

    monkeypatch.setattr("sparkrack.resources.units.time.sleep", lambda seconds: None)
    enable = "systemctl --user -M sparkrack@ enable -- podman.socket"
    units.on_the_bus(lambda: run(TARGET, enable, sudo=True))
    assert len(ran) == 3
    answers[:] = [SshError("exited 1: Unit podman.socket does not exist")]
    with pytest.raises(SshError, match="does not exist"):  # any other failure, at once
        units.on_the_bus(lambda: run(TARGET, "systemctl start -- podman.socket"))


def test_removing_a_unit_is_asked_again_when_the_user_bus_was_lost(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """As CI saw in a destroy: `disable` met a user manager whose bus was not there yet."""
    answers: list[SshError | None] = [SshError(LOST), None]
    ran: list[str] = []

    def run(target: Target, command: str, sudo: bool = False) -> None:
        ran.append(command)
        if error := answers.pop(0):
            raise error

    live = {"enabled": True, "active": True, "load_state": "loaded"}
    monkeypatch.setattr(units.UnitProvider, "observe", lambda self, target, props: live)
    monkeypatch.setattr("sparkrack.resources.units.ssh.run", run)
    monkeypatch.setattr("sparkrack.resources.units.time.sleep", lambda seconds: None)
    props = {"unit": "podman.socket", "scope": "user", "user": "sparkrack"}
    units.UnitProvider().remove(TARGET, props)
    assert len(ran) == 2 and ran[0] == ran[1] and "disable -- podman.socket" in ran[0]


@pytest.mark.parametrize(
    ("live", "removed_first"),
    [
        (None, False),
        ({"in_memory": False, "place": "lost"}, False),
        ({"in_memory": False, "place": "on-disk"}, True),
    ],
    ids=["absent", "lost-by-a-reboot", "on-podmans-disk"],
)
def test_a_secret_is_made_in_the_runtime_directory(
    live: dict[str, object] | None, removed_first: bool
) -> None:
    """Into the user's runtime directory (tmpfs), from stdin; a secret Podman kept on disk is
    removed first, its value with it (a replace into another store would leave it there)."""
    script = create_script("grafana admin", live)
    assert script.startswith('mkdir -p -m 0700 "$XDG_RUNTIME_DIR"/sparkrack-secrets && ')
    assert script.endswith(
        "podman secret create --replace --driver file --driver-opts "
        "path=\"$XDG_RUNTIME_DIR\"/sparkrack-secrets 'grafana admin' - >/dev/null"
    )
    assert ("podman secret rm 'grafana admin' >/dev/null && " in script) is removed_first


@pytest.mark.parametrize(("status", "passes"), [(0, True), (5, True), (1, False)])
def test_a_restart_after_a_write_tolerates_only_a_unit_not_there_yet(
    status: int, passes: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """try-restart's 5 (no such unit: a first `up` writes files before their unit) is no
    failure; any other is. The command runs here, under a systemctl that answers `status`."""
    ran: list[str] = []
    monkeypatch.setattr(ssh, "run", lambda target, command, **kw: ran.append(command))
    restart_if_running(Target("n", "h", 22, "u", "k", "kh"), "prometheus.service", "sparkrack")
    stub = tmp_path / "systemctl"
    stub.write_text(f'#!/bin/sh\ncase "$*" in *try-restart*) exit {status};; esac\n')
    stub.chmod(0o755)
    path = f"{tmp_path}:{os.environ['PATH']}"
    done = subprocess.run(["sh", "-c", ran[0]], env={"PATH": path}, check=False)
    assert (done.returncode == 0) is passes


def test_a_secret_changes_at_a_new_value_not_when_the_same_is_handed_over_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(ssh, "run", lambda *args, **kwargs: Result("", "", 0))
    monkeypatch.setattr(podman_secret, "gather", lambda target, fact: "stored")
    provider = podman_secret.PodmanSecretProvider()
    node = Target("spark-1", "h", 22, "u", "/k", "/kh")
    props: dict[str, Any] = {"node": "spark-1", "connection": node.connection_props()}
    props |= {
        "user": "sparkrack",
        "name": "api key",
        "value": "new",
        "in_memory": True,
        "changed_at": 0.0,
    }
    rotated = provider.update("id", {**props, "value": "old", "changed_at": 5.0}, props)
    assert rotated.outs is not None and rotated.outs["changed_at"] > 5.0
    # Lost with a reboot and handed over again: what reads it still holds the same value.
    again = provider.update("id", {**props, "in_memory": False, "changed_at": 5.0}, props)
    assert again.outs is not None and again.outs["changed_at"] == 5.0


def test_a_unit_that_fails_to_start_is_reported_with_its_log(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    said = "`systemctl start -- dhcp.service` exited 1: Job for dhcp.service failed"

    def run(target: Target, command: str, **kwargs: Any) -> Result:
        raise SshError(said)

    def gather(target: Target, fact: Any) -> str:
        assert fact.command.startswith("journalctl") and "-u dhcp.service" in fact.command
        return "udhcpc: no lease, failing"

    monkeypatch.setattr(ssh, "run", run)
    monkeypatch.setattr(units, "gather", gather)
    node = Target("spark-15", "h", 22, "u", "/k", "/kh")
    props = {"unit": "dhcp.service", "scope": "system", "enabled": True, "active": True}
    live = {"enabled": True, "active": False, "current": True, "load_state": "loaded"}
    with pytest.raises(SshError) as failed:
        units.UnitProvider().apply(node, props, live)
    assert str(failed.value) == f"{said}\ndhcp.service's log ends:\nudhcpc: no lease, failing"

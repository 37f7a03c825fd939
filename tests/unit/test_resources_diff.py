"""Diff decisions of the node resources: which drift updates in place, which replaces."""

from __future__ import annotations

from typing import Any

import pytest

from sparkrack.resources.base import UNREACHABLE, NodeProvider
from sparkrack.resources.files import RemoteFileProvider, sha256_of
from sparkrack.resources.links import LinkProvider
from sparkrack.resources.sysctls import SysctlProvider
from sparkrack.resources.units import UnitProvider
from sparkrack.resources.users import UserProvider
from sparkrack.transport.target import (
    HostKeyRefused,
    NoSuchUser,
    Result,
    SshError,
    Target,
    Unreachable,
    command_failed,
)

from .support import CONNECTION

pytestmark = pytest.mark.unit

DESIRED: dict[type[NodeProvider], dict[str, Any]] = {
    RemoteFileProvider: {
        "path": "/etc/a.conf",
        "content": "a\n",
        "mode": "0644",
        "owner": "root",
        "group": "root",
    },
    LinkProvider: {"netdev": "enp1s0f0np0", "up": True, "mtu": 9000, "addresses": ["10.0.0.1/24"]},
    SysctlProvider: {"key": "net.core.somaxconn", "value": "8192"},
    UnitProvider: {
        "unit": "x.service",
        "scope": "system",
        "user": "",
        "enabled": True,
        "active": True,
        "reloads": [],
        "current": True,
    },
    UserProvider: {
        "name": "sparkrack",
        "subuids": ["100000:65536"],
        "subgids": ["100000:65536"],
        "linger": True,
        "memlock": "infinity",
    },
}
DRIFTED = {
    "sha256": "0" * 64,
    "mode": "0600",
    "owner": "nobody",
    "group": "nogroup",
    "up": False,
    "mtu": 1500,
    "addresses": [],
    "value": "4096",
    "persisted": False,
    "enabled": False,
    "active": False,
    "current": False,
    "subuids": [],
    "subgids": [],
    "linger": False,
    "memlock": "8388608",
}
RENAMED = {
    "path": "/etc/b.conf",
    "netdev": "enp1s0f1np1",
    "key": "net.core.netdev_max_backlog",
    "unit": "y.service",
    "scope": "user",
    "user": "other",
    "name": "other",
}


def checked(provider: NodeProvider, desired: dict[str, Any]) -> dict[str, Any]:
    result = provider.check({}, {**CONNECTION, **desired})
    assert result.failures == []
    return result.inputs


def cases(keys: str) -> list[tuple[NodeProvider, str]]:
    return [
        (kind(), key)
        for kind in DESIRED
        for key in getattr(kind, keys)
        if key in (DRIFTED if keys == "STATE" else RENAMED)
    ]


def case_id(value: object) -> str:
    """A provider by its class: its default repr carries an address, which differs between
    pytest-xdist's workers, and they must collect the same ids."""
    return type(value).__name__ if isinstance(value, NodeProvider) else str(value)


@pytest.mark.parametrize(("provider", "key"), cases("STATE"), ids=case_id)
def test_drift_in_a_read_property_updates_in_place(provider: NodeProvider, key: str) -> None:
    desired = checked(provider, DESIRED[type(provider)])
    live = {**desired, key: DRIFTED[key]}  # what read() stored after a refresh
    diff = provider.diff("id", live, desired)
    # changes=None: "changed, engine names the properties" (the host cannot send names itself)
    assert (diff.changes, diff.replaces) == (None, None)


@pytest.mark.parametrize(("provider", "key"), cases("REPLACE"), ids=case_id)
def test_a_changed_identity_replaces(provider: NodeProvider, key: str) -> None:
    desired = checked(provider, DESIRED[type(provider)])
    change = {key: RENAMED[key], **({"user": "sparkrack"} if key == "scope" else {})}
    renamed = checked(provider, {**DESIRED[type(provider)], **change})
    diff = provider.diff("id", desired, renamed)
    assert diff.replaces == sorted(change, key=list(type(provider).INPUTS).index)
    assert diff.delete_before_replace  # never two resources claiming one thing on a node


@pytest.mark.parametrize("kind", list(DESIRED))
def test_no_drift_is_no_change(kind: type[NodeProvider]) -> None:
    provider = kind()
    desired = checked(provider, DESIRED[kind])
    outputs = {**desired, "restore": {"anything": 1}, "uid": 1000, "load_state": "loaded"}
    assert provider.diff("id", outputs, desired).changes is False


def test_another_node_replaces() -> None:
    provider = RemoteFileProvider()
    desired = checked(provider, DESIRED[RemoteFileProvider])
    moved = {**desired, "node": "spark-3"}
    assert provider.diff("id", desired, moved).replaces == ["node"]


def test_a_new_address_for_the_node_updates_in_place() -> None:
    provider = RemoteFileProvider()
    desired = checked(provider, DESIRED[RemoteFileProvider])
    readdressed = {**desired, "connection": {**desired["connection"], "host": "198.18.0.99"}}
    diff = provider.diff("id", desired, readdressed)
    assert (diff.changes, diff.replaces) == (None, None)


def test_check_derives_the_hash_and_normalizes() -> None:
    inputs = checked(RemoteFileProvider(), {**DESIRED[RemoteFileProvider], "mode": "644"})
    assert inputs["mode"] == "0644"
    assert inputs["sha256"] == "87428fc522803d31065e7bce3cf03fe475096631e5e07bbd7a0fde60c4cf25c7"
    link = checked(
        LinkProvider(),
        {**DESIRED[LinkProvider], "addresses": ["10.0.0.9/24", "fd00::1/64", "10.0.0.1/24"]},
    )
    assert link["addresses"] == ["10.0.0.1/24", "10.0.0.9/24", "fd00::1/64"]


@pytest.mark.parametrize(
    ("kind", "bad", "field"),
    [
        (RemoteFileProvider, {"path": "etc/a.conf"}, "path"),
        (RemoteFileProvider, {"mode": "rw-r--r--"}, "mode"),
        (LinkProvider, {"mtu": 10}, "mtu"),
        (LinkProvider, {"addresses": ["10.0.0.300/24"]}, "addresses"),
        (SysctlProvider, {"key": "rm -rf /"}, "key"),
        (UnitProvider, {"scope": "user", "user": ""}, "user"),
        (UserProvider, {"memlock": "lots"}, "memlock"),
        (UserProvider, {"subuids": ["100000"]}, "subuids"),
    ],
)
def test_check_names_the_bad_field(
    kind: type[NodeProvider], bad: dict[str, Any], field: str
) -> None:
    result = kind().check({}, {**CONNECTION, **DESIRED[kind], **bad})
    assert [failure.property for failure in result.failures] == [field]


def test_check_names_a_missing_input() -> None:
    result = LinkProvider().check({}, {**CONNECTION, "netdev": "x", "up": True, "mtu": 9000})
    assert [failure.property for failure in result.failures] == ["addresses"]


def test_what_an_account_the_node_lacks_owned_reads_as_gone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A re-imaged node has no service user: sudo says so, and what that account owned reads as
    gone (the next `up` makes it again), not as a refresh that fails."""
    said = "sudo: unknown user sparkrack\nsudo: error initializing audit plugin sudoers_audit\n"
    target = Target("spark-2", "198.18.0.12", 22, "ubuntu", "/k", "/kh")
    asked = "sudo -n -u sparkrack -H sh -c 'podman ps'"
    failure = command_failed(target, asked, Result("", said, 1))
    assert isinstance(failure, NoSuchUser)
    ours = Result("", "sparkrack: unknown user sparkrack\n", 1)  # a user unit's read
    assert isinstance(command_failed(target, "id -u -- sparkrack || ...", ours), NoSuchUser)
    assert not isinstance(command_failed(target, "false", Result("", "no", 1)), NoSuchUser)
    provider = RemoteFileProvider()
    stored = {**checked(provider, DESIRED[RemoteFileProvider]), "restore": {"made_dirs": []}}

    def no_owner(target: Target, props: object) -> None:
        raise failure

    monkeypatch.setattr(provider, "observe", no_owner)
    read = provider.read("id", stored)
    assert (read.id, read.outs) == ("", {})


@pytest.mark.parametrize(
    "error",
    [
        Unreachable("node spark-2 (198.18.0.12): unreachable on port 22: timed out"),
        HostKeyRefused("node spark-2 (198.18.0.12): host key mismatch: it offers ssh-ed25519 X"),
    ],
)
def test_an_unavailable_node_reads_as_marked_and_plans_nothing(
    error: SshError, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A refresh that cannot use a node keeps what state knows and marks the connection, so
    `refresh: always` goes on for the other nodes; nothing is planned for the marked node (the
    program says why, once), and when it is back the next read drops the mark."""
    provider = RemoteFileProvider()
    stored = {**checked(provider, DESIRED[RemoteFileProvider]), "restore": {"made_dirs": []}}

    def down(target: Target, props: object) -> None:
        raise error

    monkeypatch.setattr(provider, "observe", down)
    read = provider.read("id", stored)
    assert read.id == "id"
    assert read.outs is not None and read.outs["restore"] == stored["restore"]
    assert read.inputs is not None
    assert read.inputs["connection"][UNREACHABLE] == str(error)
    changed = {**DESIRED[RemoteFileProvider], "content": "b\n"}
    diff = provider.diff("id", read.outs, checked(provider, changed))
    assert diff.changes is False
    monkeypatch.setattr(provider, "observe", lambda target, props: AS_DECLARED)
    again = provider.read("id", read.outs)
    assert again.inputs is not None and UNREACHABLE not in again.inputs["connection"]
    assert again.outs is not None and UNREACHABLE not in again.outs["connection"]
    back = provider.diff("id", again.outs, checked(provider, changed))
    assert back.changes is None  # planned for again: the content differs


AS_DECLARED = {"sha256": sha256_of("a\n"), "mode": "0644", "owner": "root", "group": "root"}


def test_a_resource_of_the_whole_rack_stands_still_while_a_node_does_not_answer() -> None:
    """The program marks what spans the rack (target.Target.standing): nothing is planned for it,
    whatever differs; the run after, unmarked, plans as usual and sees no change of its own."""
    provider = RemoteFileProvider()
    stored = checked(provider, DESIRED[RemoteFileProvider])
    changed = {**DESIRED[RemoteFileProvider], "content": "b\n"}
    marked = checked(provider, changed)
    marked["connection"] = {**marked["connection"], "standing": "spark-3 does not answer"}
    assert provider.diff("id", stored, marked).changes is False
    assert provider.diff("id", stored, checked(provider, changed)).changes is None
    assert (
        provider.diff("id", stored, checked(provider, DESIRED[RemoteFileProvider])).changes is False
    )

"""The service user on day 2 (issue 31): a removal keeps the account `up` made and its home (the
weights, the staged shards and the images live there), and a range of subordinate ids that
another account holds is refused before anything changes."""

from __future__ import annotations

from typing import Any

import pytest

from sparkrack.facts import Fact
from sparkrack.resources import base, users
from sparkrack.resources.base import NodeProvider
from sparkrack.resources.users import UserProvider, overlaps, shared_ranges
from sparkrack.transport import ssh
from sparkrack.transport.target import Result, SshError, Target, Unreachable

from .support import CONNECTION

pytestmark = pytest.mark.unit

USER = "svc"
PASSWD = f"{USER}:x:1001:1001::/srv/{USER}:/bin/bash\n"
SUBIDS = "ubuntu:100000:65536\n"  # what useradd gave the box's first login (Ubuntu, DGX OS)
PROPS: dict[str, Any] = {
    **CONNECTION,
    "name": USER,
    "subuids": ["1000000000:65536"],
    "subgids": ["1000000000:65536"],
    "linger": True,
    "memlock": "infinity",
}


DROPIN_DIR = "/etc/systemd/system/user@1001.service.d"


class Node:
    """A node as the User provider reads it: facts answered from text, commands recorded."""

    def __init__(self, subids: str = SUBIDS, linger: str = "yes") -> None:
        self.answers = {
            "getent passwd": PASSWD,
            "/etc/subuid": subids + f"{USER}:1000000000:65536\n",
            "/etc/subgid": subids + f"{USER}:1000000000:65536\n",
            "Linger": f"Linger={linger}\n",
            "LimitMEMLOCK": "LimitMEMLOCK=infinity\n",
            "dirname --": f"{DROPIN_DIR}\n",  # missing_directories: none of the drop-in's yet
        }
        self.ran: list[str] = []

    def gather(self, _target: Target, fact: Fact[Any]) -> Any:
        found = [text for key, text in self.answers.items() if key in fact.command]
        assert found, fact.command
        return fact.parse(found[0])

    def run(self, _target: Target, command: str, **_: Any) -> Result:
        self.ran.append(command)
        return Result(stdout="", stderr="", exit_status=0)


@pytest.fixture
def node(monkeypatch: pytest.MonkeyPatch) -> Node:
    fake = Node()
    monkeypatch.setattr(users, "gather", fake.gather)
    monkeypatch.setattr(ssh, "run", fake.run)
    return fake


def test_removing_a_user_up_created_keeps_the_account_and_says_so(
    node: Node, capsys: pytest.CaptureFixture[str]
) -> None:
    restore = {"subuids": [], "subgids": [], "linger": False, "memlock": "", "created": True}
    restore["made_dirs"] = [DROPIN_DIR]  # by the drop-in's write
    UserProvider().delete("id", {**PROPS, "restore": restore})
    assert not [command for command in node.ran if "userdel" in command]
    assert f"rmdir --ignore-fail-on-non-empty -- {DROPIN_DIR} 2>/dev/null || true" in node.ran
    assert "loginctl disable-linger -- svc" in node.ran
    assert "systemctl stop -- user@1001.service" in node.ran
    said = capsys.readouterr().err
    assert "node spark-2 (198.18.0.12): kept user svc and /srv/svc" in said
    assert "sudo userdel --remove svc" in said  # how to delete them, for one who wants to


def test_removing_a_user_that_was_there_gives_back_what_it_had(node: Node) -> None:
    restore = {"subuids": [], "subgids": [], "linger": False, "memlock": "", "created": False}
    UserProvider().delete("id", {**PROPS, "restore": restore})
    assert not [command for command in node.ran if "userdel" in command or "stop" in command]
    assert "usermod --del-subuids=1000000000-1000065535 -- svc" in node.ran[0]


def test_a_range_another_account_holds_is_refused_before_any_change(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = Node()
    monkeypatch.setattr(users, "gather", fake.gather)
    monkeypatch.setattr(ssh, "run", fake.run)
    wanted = {**PROPS, "subuids": ["100000:65536"]}
    with pytest.raises(SshError, match=r"roles\.base\.service_user\.subuids: 100000:65536 "):
        UserProvider().apply(Target.from_props("spark-2", PROPS["connection"]), wanted, None)
    assert fake.ran == []


@pytest.mark.parametrize(
    ("span", "other", "shared"),
    [
        ("100000:65536", "100000:65536", True),
        ("100000:65536", "165535:10", True),  # the last id of the one is the first of the other
        ("100000:65536", "165536:65536", False),  # useradd's next slot: adjacent, not shared
        ("1000000000:65536", "100000:65536", False),
    ],
)
def test_overlaps(span: str, other: str, shared: bool) -> None:
    assert overlaps(span, other) is shared


def test_an_account_own_range_is_not_shared_with_itself() -> None:
    held = {"svc": ("100000:65536",), "ubuntu": ("165536:65536",)}
    assert shared_ranges("svc", ["100000:65536"], held) == []
    assert shared_ranges("svc", ["165536:65536"], held) == [
        "165536:65536 (also ubuntu's 165536:65536)"
    ]


class Gone(NodeProvider):
    """A provider whose node does not answer."""

    def remove(self, target: Target, props: Any) -> None:
        raise Unreachable(f"{target.where()}: unreachable on port 22: timed out")


def test_a_node_that_does_not_answer_leaves_the_state_with_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(base, "_DROPPED_NODES", set())
    for _ in range(3):  # three of its resources
        Gone().delete("id", dict(CONNECTION))
    said = capsys.readouterr().err.splitlines()
    assert said == [
        "warning: node spark-2 (198.18.0.12): unreachable on port 22: timed out: its resources "
        "are dropped from the stack's state; whatever sparkrack put on it stays there"
    ]


def test_a_node_that_answers_with_an_error_still_fails_the_delete() -> None:
    class Refusing(NodeProvider):
        def remove(self, target: Target, props: Any) -> None:
            raise SshError(f"{target.where()}: `rm` exited 1")

    with pytest.raises(SshError):
        Refusing().delete("id", dict(CONNECTION))


def test_the_memlock_drop_in_is_written_only_when_the_manager_grants_less(node: Node) -> None:
    """One rule with the checks and the doctor: a manager that grants more than the Plan (the
    simulator declares 8 MiB) is no drift; one that grants less gets the drop-in and a restart."""
    target = Target.from_props("spark-2", PROPS["connection"])
    planned = {**PROPS, "memlock": "8388608"}
    live = UserProvider().observe(target, planned)
    assert live is not None and live["memlock"] == "8388608"  # the node says infinity
    UserProvider().apply_memlock(target, planned, live)
    assert node.ran == []
    node.answers["LimitMEMLOCK"] = "LimitMEMLOCK=65536\n"
    live = UserProvider().observe(target, planned)
    assert live is not None and live["memlock"] == "65536"
    assert UserProvider().apply_memlock(target, planned, live) == [DROPIN_DIR]  # for delete
    assert "50-sparkrack-memlock.conf" in node.ran[0]
    assert "systemctl try-restart user@1001.service" in node.ran[1]

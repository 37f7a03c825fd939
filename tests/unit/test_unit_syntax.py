"""The one writer of unit-file values: hostile text forced past validation is refused or escaped,
never a setting of its own."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from sparkrack.resources.container_unit import quadlet_unit, run_unit
from sparkrack.text import unitsyntax
from sparkrack.text.unitsyntax import UnsafeUnitValue

pytestmark = pytest.mark.unit

PROPS = {
    "name": "app",
    "image": "localhost/app:1",
    "env": {"A": "1"},
    "devices": (),
    "ulimits": {},
    "cpuset": "",
    "options": (),
    "command": ("/bin/sleep", "1"),
    "restart": "always",
}


@pytest.mark.parametrize("write", [unitsyntax.plain, unitsyntax.quoted, unitsyntax.word])
@pytest.mark.parametrize("value", ["a\nExecStartPre=/bin/sh", "a\rb", "a\x00b"])
def test_a_line_break_or_control_character_is_refused(
    write: Callable[[str], str], value: str
) -> None:
    with pytest.raises(UnsafeUnitValue, match="one line only"):
        write(value)


@pytest.mark.parametrize(
    ("value", "written"),
    [
        ("$HOME", "$$HOME"),
        ("%h", "%%h"),
        ("a b", '"a b"'),
        ('say "hi"', '"say \\"hi\\""'),
        ("back\\slash", '"back\\\\slash"'),
        ("", '""'),
    ],
)
def test_a_command_word_keeps_its_meaning(value: str, written: str) -> None:
    assert unitsyntax.word(value) == written


def test_the_plans_podman_socket_mount_keeps_its_runtime_dir_specifier() -> None:
    socket = "--volume=%t/podman/podman.sock:/run/docker.sock:rw"
    assert unitsyntax.word(socket) == socket
    assert unitsyntax.word("--volume=/srv/%t:/m") == "--volume=/srv/%%t:/m"


def test_a_plain_setting_escapes_specifiers_and_refuses_what_needs_quotes() -> None:
    assert unitsyntax.plain("localhost/app:1%h") == "localhost/app:1%%h"
    with pytest.raises(UnsafeUnitValue, match="plain text only"):
        unitsyntax.plain("app; rm")


@pytest.mark.parametrize("render", [quadlet_unit, run_unit])
@pytest.mark.parametrize(
    "hostile",
    [
        {"env": {"A": "x\nExecStartPre=/bin/touch /tmp/pwned"}},
        {"command": ("/bin/sleep", "1\nExecStartPre=/bin/sh")},
        {"image": "localhost/app:1\nExecStartPre=/bin/sh"},
        {"options": ("--volume=/a\n/b:/c",)},
    ],
)
def test_units_forced_past_validation_are_refused_not_written(
    render: Callable[[dict[str, Any]], str], hostile: dict[str, object]
) -> None:
    with pytest.raises(UnsafeUnitValue):
        render({**PROPS, **hostile})


def test_the_quadlet_unit_quotes_env_and_escapes_specifiers() -> None:
    unit = quadlet_unit({**PROPS, "env": {"A": 'x "y" %h $z'}})
    assert 'Environment="A=x \\"y\\" %%h $z"' in unit.splitlines()

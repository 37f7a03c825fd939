"""A sparkrack-managed block inside a file that others own too (/etc/hosts, /etc/default/...)."""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from sparkrack.facts import Fact

ABSENT = "absent"
BEGIN = "# BEGIN sparkrack {name}"
END = "# END sparkrack {name}"


@dataclass(frozen=True)
class BlockedFile:
    """The whole file (None when absent); the block is found with `block_of`."""

    text: str | None


def markers(name: str) -> tuple[str, str]:
    return BEGIN.format(name=name), END.format(name=name)


def block_of(text: str, name: str) -> str | None:
    """The lines between our markers (newline-terminated), or None when no block is there."""
    begin, end = markers(name)
    lines = text.splitlines(keepends=True)
    stripped = [line.rstrip("\n") for line in lines]
    if begin not in stripped or end not in stripped[stripped.index(begin) :]:
        return None
    start = stripped.index(begin)
    stop = stripped.index(end, start)
    return "".join(lines[start + 1 : stop])


def with_block(text: str, name: str, block: str | None) -> str:
    """`text` with our block replaced (or appended, or removed with None); the rest untouched."""
    begin, end = markers(name)
    lines = text.splitlines(keepends=True)
    stripped = [line.rstrip("\n") for line in lines]
    if begin in stripped and end in stripped[stripped.index(begin) :]:
        start = stripped.index(begin)
        stop = stripped.index(end, start)
        before, after = lines[:start], lines[stop + 1 :]
    else:
        before, after = lines, []
    if before and not before[-1].endswith("\n"):
        before[-1] += "\n"
    body = [] if block is None else [f"{begin}\n", block, f"{end}\n"]
    if block is not None and block and not block.endswith("\n"):
        body[1] += "\n"
    return "".join([*before, *body, *after])


def parse_blocked_file(stdout: str) -> BlockedFile:
    head, _, rest = stdout.partition("\n")
    return BlockedFile(None if head == ABSENT else rest)


def blocked_file(path: str) -> Fact[BlockedFile]:
    quoted = shlex.quote(path)
    command = f"if [ -e {quoted} ]; then echo present; cat -- {quoted}; else echo {ABSENT}; fi"
    return Fact(command, parse_blocked_file, sudo=True)

"""A file's mode, owner, group and content hash (`stat` + `sha256sum`), or its absence."""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from sparkrack.facts import Fact

ABSENT = "absent"


@dataclass(frozen=True)
class FileState:
    mode: str  # four octal digits, "0644"
    owner: str
    group: str
    sha256: str


def normalize_mode(mode: str) -> str:
    """'644', '0644' and '0o644' all read as '0644'."""
    return format(int(mode.removeprefix("0o"), 8), "04o")


def parse_file_state(stdout: str) -> FileState | None:
    lines = stdout.strip().splitlines()
    if lines == [ABSENT]:
        return None
    mode, owner, group = lines[0].split()
    return FileState(normalize_mode(mode), owner, group, sha256=lines[1].split()[0])


def file_state(path: str) -> Fact[FileState | None]:
    # Read as root: managed files may be 0600 and owned by root.
    quoted = shlex.quote(path)
    command = (
        f"if [ -e {quoted} ]; then stat -c '%a %U %G' {quoted} && sha256sum {quoted}; "
        f"else echo {ABSENT}; fi"
    )
    return Fact(command, parse_file_state, sudo=True)


def parse_owner(stdout: str) -> str | None:
    return stdout.strip() or None


def owner(path: str) -> Fact[str | None]:
    """The user owning a path, None when there is no such path (read as root: any path)."""
    return Fact(f"stat -c %U {shlex.quote(path)} 2>/dev/null || true", parse_owner, sudo=True)


MISSING_DIRECTORIES = (
    'for d in "$@"; do while [ ! -e "$d" ]; do echo "$d"; d=$(dirname -- "$d"); done; done'
)


def deepest_first(directories: list[str]) -> list[str]:
    return sorted(set(directories), key=lambda path: (-path.count("/"), path))


def parse_directories_deepest_first(stdout: str) -> list[str]:
    return deepest_first(stdout.split())


def missing_directories(*directories: str) -> Fact[list[str]]:
    """Those of `directories` and their parents that do not exist yet, deepest first: what a
    write would make, and so what its delete takes back."""
    command = f"sh -c {shlex.quote(MISSING_DIRECTORIES)} sh {shlex.join(directories)}"
    return Fact(command, parse_directories_deepest_first, sudo=True)


def parse_directory_set(stdout: str) -> frozenset[str]:
    return frozenset(stdout.split("\n")) - {""}


def directories_under(root: str) -> Fact[frozenset[str]]:
    """Every directory under `root`, itself included (none when it is not there)."""
    return Fact(
        f"find {shlex.quote(root)} -type d 2>/dev/null || true", parse_directory_set, sudo=True
    )

"""Which Debian/Ubuntu packages are installed (`dpkg-query`)."""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from sparkrack.facts import Fact

INSTALLED = "install ok installed"


def parse_installed(stdout: str) -> set[str]:
    """`dpkg-query -W -f '${Package}\\t${Status}\\n'` lines -> the names fully installed."""
    names = set()
    for line in stdout.splitlines():
        name, _, status = line.partition("\t")
        if status.strip() == INSTALLED:
            names.add(name.split(":")[0])  # an arch-qualified name reads as its package
    return names


def installed_packages(names: Sequence[str]) -> Fact[set[str]]:
    # dpkg-query exits 1 when a name is unknown to dpkg: that package is simply not installed.
    fmt = "${Package}\\t${Status}\\n"
    command = f"dpkg-query -W -f {shlex.quote(fmt)} -- {shlex.join(names)} 2>/dev/null || true"
    return Fact(command, parse_installed)

"""How the checks read a node: a fact (sparkrack.facts) through testinfra's host, and the pure
parsers of what no resource reads (proc files, arping, node-exporter's page)."""

from __future__ import annotations

import re
from typing import Any, TypeVar

from sparkrack.facts import Fact
from sparkrack.spec import parse_cpulist

T = TypeVar("T")


def read(host: Any, fact: Fact[T]) -> T:
    """A fact read through testinfra's host: the same command and parser a resource uses."""
    if fact.stdin is not None:
        raise ValueError(f"testinfra cannot feed stdin to `{fact.command}`")
    if fact.sudo:
        with host.sudo():
            return fact.parse(host.check_output(fact.command))
    return fact.parse(host.check_output(fact.command))


def arping_mac(stdout: str) -> str | None:
    """`Unicast reply from 198.19.0.2 [6E:EC:37:A7:85:C9]  0.531ms` -> the MAC, lower case."""
    found = re.search(r"reply from \S+ \[([0-9A-Fa-f:]{17})\]", stdout)
    return found.group(1).lower() if found else None


def cpus(cpulist: str) -> set[int]:
    return set(parse_cpulist(cpulist)) if cpulist.strip() else set()


def shell_assignments(text: str) -> dict[str, str]:
    """KEY=value lines of a /etc/default file, quotes removed, comments skipped."""
    values = {}
    for line in text.splitlines():
        key, sep, value = line.strip().partition("=")
        if sep and not key.startswith("#"):
            values[key.strip()] = value.strip().strip("\"'")
    return values


def env_list(pairs: list[str]) -> dict[str, str]:
    return dict(pair.partition("=")[::2] for pair in pairs)


def collectors(metrics: str) -> set[str]:
    """node-exporter's enabled collectors: every one reports node_scrape_collector_success."""
    return set(re.findall(r'^node_scrape_collector_success\{collector="([^"]+)"\}', metrics, re.M))

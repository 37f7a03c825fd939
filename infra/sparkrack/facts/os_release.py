"""The node's OS (/etc/os-release): its name as a person says it, and the family it belongs to."""

from __future__ import annotations

from sparkrack.facts import Fact

OS_RELEASE = "cat /etc/os-release"


def parse_fields(stdout: str) -> dict[str, str]:
    """KEY=value lines, quotes removed."""
    values = {}
    for line in stdout.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            values[key.strip()] = value.strip().strip('"')
    return values


def parse_os_release(stdout: str) -> str:
    """PRETTY_NAME, else NAME and VERSION_ID."""
    values = parse_fields(stdout)
    if "PRETTY_NAME" in values:
        return values["PRETTY_NAME"]
    return " ".join(v for v in (values.get("NAME"), values.get("VERSION_ID")) if v) or "unknown"


def os_release() -> Fact[str]:
    return Fact(OS_RELEASE, parse_os_release)


def parse_os_family(stdout: str) -> tuple[str, ...]:
    """ID, then the IDs of ID_LIKE: DGX OS reads ('ubuntu', 'debian')."""
    values = parse_fields(stdout)
    return (values.get("ID", ""), *values.get("ID_LIKE", "").split())


def os_family() -> Fact[tuple[str, ...]]:
    return Fact(OS_RELEASE, parse_os_family)

"""The node's OS as a person names it (/etc/os-release)."""

from __future__ import annotations

from sparkrack.facts import Fact


def parse_os_release(stdout: str) -> str:
    """PRETTY_NAME, else NAME and VERSION_ID, from /etc/os-release."""
    values = {}
    for line in stdout.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            values[key.strip()] = value.strip().strip('"')
    if "PRETTY_NAME" in values:
        return values["PRETTY_NAME"]
    return " ".join(v for v in (values.get("NAME"), values.get("VERSION_ID")) if v) or "unknown"


def os_release() -> Fact[str]:
    return Fact("cat /etc/os-release", parse_os_release)

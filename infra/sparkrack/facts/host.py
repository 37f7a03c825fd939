"""What kind of container host a node is: Quadlet needs Podman >= 4.4 and cgroup v2."""

from __future__ import annotations

from dataclasses import dataclass

from sparkrack.facts import Fact

QUADLET_MIN = (4, 4)


def parse_podman_version(stdout: str) -> tuple[int, int]:
    """'podman version 5.4.2' -> (5, 4)."""
    major, minor = stdout.split()[-1].split(".")[:2]
    return int(major), int(minor)


@dataclass(frozen=True)
class HostKind:
    podman_quadlet: bool
    cgroup2: bool

    @property
    def quadlet(self) -> bool:
        return self.podman_quadlet and self.cgroup2


def parse_host_kind(stdout: str) -> HostKind:
    version, filesystem = stdout.strip().splitlines()[-2:]
    return HostKind(parse_podman_version(version) >= QUADLET_MIN, filesystem == "cgroup2fs")


def host_kind() -> Fact[HostKind]:
    return Fact("podman --version; stat -fc %T /sys/fs/cgroup", parse_host_kind)

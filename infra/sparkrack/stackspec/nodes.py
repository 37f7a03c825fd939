"""The nodes: SSH defaults and overrides, and each node's name, address and hardware."""

from __future__ import annotations

from pydantic import (
    Field,
)

from sparkrack.stackspec.base import Address, Port, Size, SomeCpus, StrictModel
from sparkrack.text.spectext import (
    LocalPath,
    Netdev,
    NodeName,
    PosixUser,
    ShortName,
)


class SshDefaults(StrictModel):
    user: PosixUser
    port: Port = 22
    key_path: LocalPath = "~/.ssh/id_ed25519"
    # Host keys are pinned: a node whose key is not in this file is refused, never auto-added.
    known_hosts: LocalPath = "~/.ssh/known_hosts"


class SshOverride(StrictModel):
    user: PosixUser | None = None
    port: Port | None = None
    key_path: LocalPath | None = None
    known_hosts: LocalPath | None = None


class NodeOverrides(StrictModel):
    """What one node may declare differently from its hardware profile."""

    management_nic: Netdev | None = None
    housekeeping_cpus: SomeCpus | None = None
    compute_cpus: SomeCpus | None = None
    gpu_memory: Size | None = None


class NodeSpec(StrictModel):
    name: NodeName
    address: Address = Field(description="management address (SSH, Ray, NCCL bootstrap)")
    hardware: ShortName
    ssh: SshOverride = SshOverride()
    overrides: NodeOverrides = NodeOverrides()

"""One container as the Container resource takes it: the engine's and monitoring's alike."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from sparkrack.stackspec import StrictModel
from sparkrack.text.cpus import CpuList


class ContainerPlan(StrictModel):
    name: str
    image: str
    command: tuple[str, ...]
    env: dict[str, str] = Field(default_factory=dict)
    devices: tuple[str, ...] = ()  # `podman run --device`: CDI names or device paths
    ulimits: dict[str, str] = Field(default_factory=dict)
    cpuset: CpuList  # the cores it may run on; none when not pinned
    options: tuple[str, ...] = ()  # further `podman run` options: mounts, /dev/shm, health
    # Monitoring runs always; the engine restarts on failure (a clean stop is a stop).
    restart: Literal["on-failure", "always"] = "on-failure"
    # The container of this node it lives with: stopped and restarted with it (systemd PartOf).
    part_of: str = ""
    # How long a stop waits for it to exit before killing it (Podman's default: 10 s); the vLLM
    # server drains the requests in flight in that time.
    stop_timeout_s: int | None = None

"""What a user's rootless Podman holds: an image's id, a container's inspect record.

The commands are bare `podman ...`: a reader runs them as the service user with `Fact.as_user`.
A missing image or container reads as absence, not as an error.
"""

from __future__ import annotations

import json
import shlex
from typing import Any

from sparkrack.facts import Fact


def parse_image_id(stdout: str) -> str:
    """The id, or '' when the user's Podman has no such image."""
    return stdout.strip()


def image_id(reference: str) -> Fact[str]:
    inspect = f"podman image inspect --format '{{{{.Id}}}}' {shlex.quote(reference)}"
    return Fact(f"{inspect} 2>/dev/null || true", parse_image_id)


def parse_container(stdout: str) -> dict[str, Any] | None:
    """`podman container inspect`'s record (State, Config.Env, HostConfig, ...), or None."""
    found = json.loads(stdout) if stdout.strip() else []
    return dict(found[0]) if found else None


def container(name: str) -> Fact[dict[str, Any] | None]:
    inspect = f"podman container inspect {shlex.quote(name)}"
    return Fact(f"{inspect} 2>/dev/null || true", parse_container)

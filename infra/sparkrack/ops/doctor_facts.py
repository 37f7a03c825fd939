"""What `sparkrack doctor` reads on a node: each a read-only command and a parser of its output.

The parsers are pure and golden-tested on captured output, as the facts in `sparkrack.facts`
are; the link state and the service user's memlock come from there.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

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


def parse_rdma(stdout: str) -> dict[str, str]:
    """device -> port 1 state as sysfs words it ('4: ACTIVE', '1: DOWN')."""
    devices = {}
    for line in stdout.splitlines():
        name, _, state = line.strip().partition(" ")
        if name:
            devices[name] = state.strip() or "unknown"
    return devices


def rdma_devices() -> Fact[dict[str, str]]:
    command = (
        'for d in /sys/class/infiniband/*; do [ -e "$d" ] || continue; '
        'printf \'%s %s\\n\' "${d##*/}" "$(cat "$d/ports/1/state" 2>/dev/null || echo unknown)"; '
        "done"
    )
    return Fact(command, parse_rdma)


# Every place NCCL_IB_DISABLE could come from for the engine: the login environment, NCCL's own
# config files, systemd's (system and user) environment, and the rootless Podman and Quadlet
# configuration of the service user, who runs the engine. `~` is that user's home.
NCCL_ENV_FILES = (
    "/etc/environment",
    "/etc/nccl.conf",
    "/etc/environment.d/*.conf",
    "/etc/systemd/system.conf",
    "/etc/systemd/system.conf.d/*.conf",
    "/etc/systemd/user.conf",
    "/etc/systemd/user.conf.d/*.conf",
    "/etc/containers/containers.conf",
    "/etc/containers/containers.conf.d/*.conf",
    "/etc/containers/systemd/*.container",
    "~/.nccl.conf",
    "~/.config/environment.d/*.conf",
    "~/.config/containers/containers.conf",
    "~/.config/containers/containers.conf.d/*.conf",
    "~/.config/containers/systemd/*.container",
)
VARIABLE = "NCCL_IB_DISABLE"


@dataclass(frozen=True)
class EnvHit:
    """A line that sets NCCL_IB_DISABLE to a value other than 0."""

    source: str
    line: int
    value: str


def parse_env_hits(stdout: str) -> list[EnvHit]:
    """`grep -Hn` lines, `source:line:text`; comments and NCCL_IB_DISABLE=0 are not hits."""
    hits = []
    for raw in stdout.splitlines():
        source, line, text = [*raw.split(":", 2), "", ""][:3]
        hit = env_hit(source, int(line) if line.isdigit() else 0, text)
        if hit is not None:
            hits.append(hit)
    return hits


def env_hit(source: str, line: int, text: str) -> EnvHit | None:
    if text.lstrip().startswith("#"):
        return None
    match = re.search(rf"{VARIABLE}\s*=\s*[\"']?([^\"'\s,\]]*)", text)
    if match is None or match.group(1) in ("", "0"):
        return None
    return EnvHit(source, line, match.group(1))


def nccl_env_hits() -> Fact[list[EnvHit]]:
    files = " ".join(path.replace("~", "$HOME", 1) for path in NCCL_ENV_FILES)
    managers = " ".join(
        f"{manager} show-environment 2>/dev/null | grep -n {VARIABLE} | sed 's|^|{label}:|';"
        for manager, label in (
            ("systemctl", "systemd manager environment"),
            ("systemctl --user", "systemd user manager environment"),
        )
    )
    command = f"grep -Hns {VARIABLE} -- {files} 2>/dev/null; {managers} true"
    return Fact(command, parse_env_hits)


ABSENT = "#absent"


def parse_image_env(stdout: str) -> list[str] | None:
    """The image's environment lines, or None when the image is not on the node."""
    if stdout.strip() == ABSENT:
        return None
    return [line for line in stdout.splitlines() if line.strip()]


def image_env(image: str) -> Fact[list[str] | None]:
    quoted = shlex.quote(image)
    command = (
        f"if podman image exists {quoted} 2>/dev/null; then podman image inspect --format "
        f"'{{{{range .Config.Env}}}}{{{{println .}}}}{{{{end}}}}' {quoted}; "
        f"else echo {shlex.quote(ABSENT)}; fi"
    )
    return Fact(command, parse_image_env)


def image_env_hits(lines: Sequence[str], image: str) -> list[EnvHit]:
    hits = (env_hit(f"image {image}", 0, line) for line in lines)
    return [hit for hit in hits if hit is not None]


@dataclass(frozen=True)
class PingResult:
    passed: bool
    detail: str  # the line that says why, for a failure


def parse_ping(stdout: str, exit_status: int) -> PingResult:
    """iputils ping's output: the loss summary, and on failure the last `ping:` error with it
    ('Message too long' is a smaller MTU on the path)."""
    lines = [line.strip() for line in stdout.splitlines() if line.strip()]
    loss = next((line for line in lines if "packet loss" in line), "")
    if exit_status == 0:
        return PingResult(True, loss)
    errors = [line.removeprefix("ping: ") for line in lines if line.startswith("ping:")]
    detail = "; ".join(part for part in (errors[-1] if errors else "", loss) if part)
    return PingResult(False, detail or f"ping exited {exit_status}")


def jumbo_ping_command(netdev: str, address: str, payload_bytes: int) -> str:
    # Don't fragment at full size: a hop with a smaller MTU refuses rather than splits the frame.
    ping = [
        "ping",
        "-M",
        "do",
        "-s",
        str(payload_bytes),
        "-c",
        "3",
        "-i",
        "0.2",
        "-W",
        "1",
        "-I",
        netdev,
    ]
    return shlex.join([*ping, address]) + " 2>&1"

"""Where NCCL_IB_DISABLE is set on a node, or in an image: the setting that silently puts NCCL on
sockets (seed 000). Every hit is a line to show a person. And what NCCL's own log lines say it
runs on."""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from sparkrack.facts import Fact

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
class QueuePairMiss:
    """NCCL's `Call to ibv_modify_qp failed with 110 Connection timed out, on dev rocep1s0f0:1,
    curr state INIT, next state RTR, local GID index 3, local GID ::ffff:10.0.0.1, remote GID
    ::ffff:10.0.1.2`: an HCA whose queue pair found no path to the peer's (another cable)."""

    device: str
    local: str  # the IPv4 address of the local GID
    remote: str
    error: str


QP_MISS = re.compile(
    r"ibv_modify_qp failed with (?P<error>[^,]+),? (?:on )?dev (?P<device>[^\s,:]+)(?::\d+)?,"
    r".*?local GID ::ffff:(?P<local>[\d.]+), remote GID ::ffff:(?P<remote>[\d.]+)"
)


def queue_pair_misses(lines: Sequence[str]) -> tuple[QueuePairMiss, ...]:
    found = (QP_MISS.search(line) for line in lines)
    return tuple(
        QueuePairMiss(m["device"], m["local"], m["remote"], m["error"].strip()) for m in found if m
    )


@dataclass(frozen=True)
class NcclTransport:
    """What one host's NCCL lines in an engine log say of its network."""

    sockets: tuple[str, ...]  # `NET/Socket` lines: NCCL on TCP
    using: str  # the last `NET/IB : Using` line's devices, '' when there is none
    roce_ports: tuple[str, ...]  # the `device:port` of each RoCE device in it
    unconnected: tuple[QueuePairMiss, ...] = ()  # queue pairs that never reached their peer

    @property
    def silent(self) -> bool:
        """Nothing said of the network yet: an engine starting, before NCCL's init."""
        return not (self.sockets or self.using or self.unconnected)


# vLLM's first line on every start. The engine's log file outlives its container (a restarted
# engine appends to it), so only the lines after the last start are the running engine's: as
# the RDMA collector reads them (roles/monitoring/files/rdma_textfile.py), a repaired fallback
# stops failing.
ENGINE_START = "vLLM API server version"


def engine_starts(log_lines: Sequence[str]) -> list[Sequence[str]]:
    """The log cut at each engine start, newest first (what precedes the first start last)."""
    cuts = [i for i, line in enumerate(log_lines) if ENGINE_START in line]
    bounds = [0, *cuts] if not cuts or cuts[0] else cuts
    ends = [*bounds[1:], len(log_lines)]
    return [log_lines[a:b] for a, b in zip(bounds, ends, strict=True)][::-1]


def current_start(log_lines: Sequence[str]) -> Sequence[str]:
    return engine_starts(log_lines)[0]


def nccl_transport(log_lines: Sequence[str], host: str) -> NcclTransport:
    """NCCL_DEBUG=INFO lines are prefixed `host:pid:tid [gpu]`: only `host`'s are read, and only
    the running engine's (since its last start). A rank's line reaches the engine's log through
    Ray, behind Ray's and vLLM's own prefixes (`(EngineCore_DP0 pid=2301) (RayWorkerWrapper
    pid=2981, ip=...) spark-3995:2981:2981 [0] NCCL INFO ...`): those are skipped."""
    return transport_of(current_start(log_lines), host)


def latest_nccl_transport(log_lines: Sequence[str], host: str) -> NcclTransport | None:
    """What the newest engine start that got as far as NCCL's init said of `host`'s network:
    while a refused engine restarts, the running start may not have got there yet."""
    said = (transport_of(start, host) for start in engine_starts(log_lines))
    return next((transport for transport in said if not transport.silent), None)


def transport_of(lines: Sequence[str], host: str) -> NcclTransport:
    own = re.compile(rf"^(?:\([^()]*\)\s+)*{re.escape(host)}:\d+:\d+ ")
    mine = [line for line in lines if own.match(line)]
    ib = [line.split("NET/IB : Using", 1)[1].strip() for line in mine if "NET/IB : Using" in line]
    using = ib[-1] if ib else ""
    return NcclTransport(
        sockets=tuple(line.strip() for line in mine if "NET/Socket" in line),
        using=using,
        roce_ports=tuple(re.findall(r"\[\d+\]([^\s\[\]]+:\d+)/RoCE", using)),
        unconnected=queue_pair_misses(mine),
    )

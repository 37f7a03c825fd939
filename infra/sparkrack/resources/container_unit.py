"""A container's systemd unit for the service user: a Quadlet `.container` (Podman >= 4.4) or,
where Quadlet cannot serve, a plain user unit that runs `podman run` in the foreground. Pure text,
every value through `unitsyntax`; resources/podman.py's Container writes and reads it."""

from __future__ import annotations

import posixpath

from sparkrack.facts.host import HostKind
from sparkrack.resources.base import Props
from sparkrack.text import unitsyntax
from sparkrack.text.cpus import CpuList

# A container that fails at once (a Ray worker whose head is restarting) is retried every 5 s:
# at systemd's default 100 ms it would use up the start limit (5 in 10 s) in half a second and
# stay failed until someone ran `reset-failed`.
RESTART_PACING = "RestartSec=5"


def unit_section(props: Props) -> list[str]:
    """[Unit]: the description, and the container this one lives with (stopped and restarted
    with it, started after it)."""
    name = unitsyntax.plain(props["name"])
    lines = ["# managed by sparkrack", "[Unit]", f"Description=sparkrack container {name}"]
    if props.get("part_of"):
        companion = f"{unitsyntax.plain(props['part_of'])}.service"
        lines += [f"PartOf={companion}", f"After={companion}"]
    return lines


PODMAN_STOP_TIMEOUT_S = 10  # Podman's own default: SIGTERM, then SIGKILL this much later


def stop_limit(props: Props) -> list[str]:
    """systemd's own bound on a stop (90 s by default) kept above the container's, so that a
    draining engine is never killed by the unit before Podman's timeout would."""
    stop = props.get("stop_timeout_s")
    return [f"TimeoutStopSec={int(stop) + PODMAN_STOP_TIMEOUT_S}"] if stop else []


def cpu_affinity(props: Props) -> list[str]:
    """systemd's CPUAffinity= of the container's cpuset; none when it is not pinned."""
    cpus = CpuList.parse(props["cpuset"])
    return [f"CPUAffinity={cpus.systemd()}"] if cpus else []


def quadlet_unit(props: Props) -> str:
    """The `.container` unit. CPUAffinity as well as --cpuset-cpus: rootless Podman on cgroup v1
    ignores the cpuset, while the unit's affinity is inherited by the container on any host."""
    name = unitsyntax.plain(props["name"])
    lines = unit_section(props)
    lines += [
        "",
        "[Container]",
        f"ContainerName={name}",
        f"Image={unitsyntax.plain(props['image'])}",
    ]
    lines += ["Network=host", "Pull=never"]
    env = sorted(props["env"].items())
    lines += [f"Environment={unitsyntax.quoted(f'{k}={v}')}" for k, v in env]
    lines += [f"AddDevice={unitsyntax.plain(device)}" for device in props["devices"]]
    ulimits = sorted(props["ulimits"].items())
    lines += [f"Ulimit={unitsyntax.plain(f'{kind}={limit}')}" for kind, limit in ulimits]
    options = [f"--cpuset-cpus={props['cpuset']}"] if props["cpuset"] else []
    options += [f"--stop-timeout={stop}"] if (stop := props.get("stop_timeout_s")) else []
    options += props.get("options") or []
    lines += [f"PodmanArgs={unitsyntax.word(option)}" for option in options]
    if props["command"]:
        lines.append(f"Exec={unitsyntax.command_line(props['command'])}")
    lines += ["", "[Service]", f"Restart={props['restart']}", RESTART_PACING, "TimeoutStartSec=300"]
    lines += stop_limit(props)
    lines += cpu_affinity(props)
    # Quadlet would order the unit after the system's network-online.target, which nothing pulls
    # in on a node whose links sparkrack configures: every start would wait 90 s for it. The
    # container uses the host's network, which the fabric role has up before any container.
    lines += ["", "[Quadlet]", "DefaultDependencies=false"]
    lines += ["", "[Install]", "WantedBy=default.target"]
    return "\n".join(lines) + "\n"


def run_unit(props: Props) -> str:
    """A plain user unit running the same container in the foreground, where Quadlet cannot
    serve: Podman < 4.4, or a cgroup v1 host. There a rootless container gets no cgroup, so
    Quadlet's detached `podman run` leaves conmon untracked and systemd stops the unit (measured
    on the simulator); runc refuses `--cgroups=disabled`, which would keep conmon in the unit."""
    args = ["/usr/bin/podman", "run", "--rm", "--replace", "--name", props["name"]]
    args += ["--network=host", "--pull=never"]
    args += [f"--env={k}={v}" for k, v in sorted(props["env"].items())]
    args += [f"--device={device}" for device in props["devices"]]
    args += [f"--ulimit={name}={limit}" for name, limit in sorted(props["ulimits"].items())]
    args += [f"--cpuset-cpus={props['cpuset']}"] if props["cpuset"] else []
    args += props.get("options") or []
    args += [props["image"], *props["command"]]
    name = unitsyntax.plain(props["name"])
    lines = unit_section(props)
    grace = str(props.get("stop_timeout_s") or PODMAN_STOP_TIMEOUT_S)
    stop = unitsyntax.command_line(["/usr/bin/podman", "stop", "--ignore", "-t", grace, name])
    lines += ["", "[Service]", f"ExecStart={unitsyntax.command_line(args)}", f"ExecStop={stop}"]
    lines += [f"Restart={props['restart']}", RESTART_PACING, *stop_limit(props)]
    lines += cpu_affinity(props)
    lines += ["", "[Install]", "WantedBy=default.target"]
    return "\n".join(lines) + "\n"


def unit_file(props: Props, host: HostKind) -> tuple[str, str]:
    """(path, content) of the container's unit for the service user on this kind of host."""
    home, name = str(props["home"]), str(props["name"])
    if host.quadlet:
        path = posixpath.join(home, ".config/containers/systemd", f"{name}.container")
        return path, quadlet_unit(props)
    return posixpath.join(home, ".config/systemd/user", f"{name}.service"), run_unit(props)

"""EngineTransport: every rank of the running engine on its planned HCAs, read from its log.

NCCL picks its network once, when the engine starts: an engine started while a fabric port was
down runs on the HCAs it found then (one of two, or sockets: seed 001's silent fallback) and
stays there after the port comes back. Every other resource then reads as repaired, so the
transport is state of its own: a refresh reads the running engine's NCCL lines in its log file
on the head (facts.nccl_env, as verification does), preview names a rank off its HCAs, and `up`
restarts the engine after every other repair of the run (it depends on all of them) and waits
until each rank says it runs on its planned HCAs. What a restart cannot change reads as planned:
a rank that has said nothing yet (an engine starting), or HCAs whose queue pairs find no path
(a cable map the Plan got wrong: verification names it, `sparkrack doctor` explains it).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import pulumi

from sparkrack.facts.nccl_env import ENGINE_START, nccl_transport
from sparkrack.facts.podman import log_file
from sparkrack.facts.units import systemctl
from sparkrack.resources.base import PULUMI_MODULE, Live, NodeProvider, NodeResource, Props, say
from sparkrack.resources.podman_reads import read_as
from sparkrack.resources.units import on_the_bus
from sparkrack.transport import ssh
from sparkrack.transport.target import SshError, Target

SOCKETS = "sockets"  # a rank's transport when NCCL fell back to TCP
SETTLE_POLL_S = 2.0


def rank_transport(lines: Sequence[str], host: str, planned: Sequence[str]) -> list[str]:
    """The HCAs `host`'s rank of the running engine uses, as the Plan lists them; `planned`
    itself where a restart would change nothing (see the module's doc)."""
    said = nccl_transport(lines, host)
    if said.silent or said.unconnected:
        return list(planned)
    if said.sockets:
        return [SOCKETS]
    return sorted(port.split(":")[0] for port in said.roce_ports)


def read_transport(lines: Sequence[str], wanted: dict[str, list[str]]) -> dict[str, list[str]]:
    """Each rank's transport as `rank_transport` reads it: the resource's state."""
    return {host: rank_transport(lines, host, hcas) for host, hcas in wanted.items()}


def settled(lines: Sequence[str], wanted: dict[str, list[str]]) -> bool:
    """Every rank of the running engine has said it runs on its planned HCAs."""
    return all(
        not nccl_transport(lines, host).silent and rank_transport(lines, host, hcas) == hcas
        for host, hcas in wanted.items()
    )


class EngineTransportProvider(NodeProvider):
    INPUTS: ClassVar[tuple[str, ...]] = ("user", "unit", "log", "transport", "timeout_s")
    STATE: ClassVar[tuple[str, ...]] = ("transport",)
    REPLACE: ClassVar[tuple[str, ...]] = ()

    def identity(self, props: Props) -> str:
        return f"engine transport ({props['unit']})"

    def log_lines(self, target: Target, props: Props) -> tuple[str, ...]:
        return read_as(target, str(props["user"]), log_file(str(props["log"]))) or ()

    def observe(self, target: Target, props: Props) -> Live | None:
        return {"transport": read_transport(self.log_lines(target, props), props["transport"])}

    def apply(self, target: Target, props: Props, live: Live | None) -> dict[str, Any]:
        """On an update (a rank off its HCAs at this run's refresh): the engine restarted, unless
        it restarted since (another repair of this run restarted a rank), then waited for."""
        restarted_at = 0.0
        if live is not None and live["transport"] != props["transport"]:
            restarted_at = self.restart(target, props)
        self.wait(target, props)
        return {"restarted_at": restarted_at}

    def restart(self, target: Target, props: Props) -> float:
        user, unit = str(props["user"]), str(props["unit"])
        on_the_bus(lambda: ssh.run(target, systemctl("user", user, "restart", unit), sudo=True))
        say(f"{target.where()}: engine restarted: a rank ran off its planned HCAs")
        return time.time()

    def wait(self, target: Target, props: Props) -> None:
        deadline = time.monotonic() + float(props["timeout_s"])
        while not settled(lines := self.log_lines(target, props), props["transport"]):
            if time.monotonic() > deadline:
                start = [line for line in lines if ENGINE_START in line][-1:]
                seen = read_transport(lines, props["transport"])
                raise SshError(
                    f"{target.where()}: {self.identity(props)} not on the planned HCAs after "
                    f"{float(props['timeout_s']):.0f}s: {seen} (since {start or 'no start'})"
                )
            time.sleep(SETTLE_POLL_S)

    def remove(self, target: Target, props: Props) -> None:
        """Nothing on the node is the resource's own."""


@dataclass(frozen=True)
class EngineTransportArgs:
    """`transport`: host -> its planned RDMA devices, read from the engine's log file `log` as
    `user` for up to `timeout_s`; a rank off them restarts `user`'s `unit`."""

    target: Target
    user: str
    unit: str
    log: str
    transport: Mapping[str, Sequence[str]]
    timeout_s: float


class EngineTransport(NodeResource, module=PULUMI_MODULE, name="EngineTransport"):
    """The engine's ranks on their planned HCAs (EngineTransportArgs). Output: restarted_at
    (Unix time of this resource's last restart, 0 when it has made none)."""

    restarted_at: pulumi.Output[float]

    def __init__(
        self, name: str, args: EngineTransportArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        transport = {host: list(hcas) for host, hcas in args.transport.items()}
        props: dict[str, Any] = {"user": args.user, "unit": args.unit, "log": args.log}
        props |= {"transport": transport, "timeout_s": args.timeout_s, "restarted_at": 0.0}
        super().__init__(EngineTransportProvider(), name, args.target, props, opts)

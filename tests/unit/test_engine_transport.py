"""EngineTransport: a rank that NCCL started off its planned HCAs is drift, and only that."""

from __future__ import annotations

from typing import Any

import pytest

from sparkrack.facts.nccl_env import ENGINE_START
from sparkrack.resources import engine_transport
from sparkrack.resources.engine_transport import (
    SOCKETS,
    EngineTransportProvider,
    rank_transport,
    settled,
)
from sparkrack.transport.target import SshError, Target

pytestmark = pytest.mark.unit

PLANNED = {"spark-1": ["roceP2p1s0f0", "rocep1s0f0"], "spark-2": ["roceP2p1s0f1", "rocep1s0f1"]}


def ib(host: str, *devices: str) -> str:
    used = " ".join(f"[{i}]{device}:1/RoCE" for i, device in enumerate(devices))
    return f"{host}:71:71 [0] NCCL INFO NET/IB : Using {used} [RO]; OOB enp1s0f0np0:10.0.0.1<0>"


def start(*lines: str) -> list[str]:
    return [f"INFO {ENGINE_START} 0.27.1", *lines]


def test_a_rank_on_all_its_hcas_reads_as_planned_and_one_on_fewer_as_what_it_uses() -> None:
    lines = start(ib("spark-1", "rocep1s0f0", "roceP2p1s0f0"), ib("spark-2", "rocep1s0f1"))
    assert rank_transport(lines, "spark-1", PLANNED["spark-1"]) == PLANNED["spark-1"]
    assert rank_transport(lines, "spark-2", PLANNED["spark-2"]) == ["rocep1s0f1"]
    assert not settled(lines, PLANNED)


def test_sockets_are_drift_and_silence_or_an_unconnected_pair_are_not() -> None:
    sockets = start("spark-2:71:71 [0] NCCL INFO NET/Socket : Using [0]enp1s0f0np0:10.0.0.2<0>")
    assert rank_transport(sockets, "spark-2", PLANNED["spark-2"]) == [SOCKETS]
    silent = start()
    assert rank_transport(silent, "spark-2", PLANNED["spark-2"]) == PLANNED["spark-2"]
    assert not settled(silent, PLANNED)  # nothing said yet: not settled either
    missed = start(
        "spark-2:71:71 [0] NCCL WARN Call to ibv_modify_qp failed with 110 Connection timed out,"
        " on dev rocep1s0f1:1, curr state INIT, next state RTR, local GID index 3, local GID"
        " ::ffff:10.0.1.2, remote GID ::ffff:10.0.0.1"
    )
    assert rank_transport(missed, "spark-2", PLANNED["spark-2"]) == PLANNED["spark-2"]


def test_only_the_running_engines_lines_count() -> None:
    earlier = start(ib("spark-2", "rocep1s0f1"))
    now = start(ib("spark-1", "rocep1s0f0", "roceP2p1s0f0"), ib("spark-2", *PLANNED["spark-2"]))
    assert settled([*earlier, *now], PLANNED)


def props() -> dict[str, Any]:
    return {"user": "sparkrack", "unit": "vllm.service", "log": "/l", "transport": PLANNED}


def test_an_update_restarts_the_engine_only_while_a_rank_is_still_off_its_hcas(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    provider, target = EngineTransportProvider(), Target("spark-1", "h", 22, "u", "/k", "/kh")
    restarted: list[str] = []

    def restart(target: Target, props: Any) -> float:
        restarted.append(target.node)
        return 1.0

    monkeypatch.setattr(provider, "restart", restart)
    monkeypatch.setattr(provider, "wait", lambda t, p: None)
    off = {"transport": {**PLANNED, "spark-2": ["rocep1s0f1"]}}
    assert provider.apply(target, props(), off) == {"restarted_at": 1.0}
    assert provider.apply(target, props(), {"transport": PLANNED}) == {"restarted_at": 0.0}
    assert provider.apply(target, props(), None) == {"restarted_at": 0.0}  # created: no restart
    assert restarted == ["spark-1"]


def test_a_wait_that_never_settles_names_the_resource_and_what_it_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    provider, target = EngineTransportProvider(), Target("spark-1", "h", 22, "u", "/k", "/kh")
    lines = tuple(start(ib("spark-1", *PLANNED["spark-1"]), ib("spark-2", "rocep1s0f1")))
    monkeypatch.setattr(provider, "log_lines", lambda t, p: lines)
    monkeypatch.setattr(engine_transport, "SETTLE_POLL_S", 0.0)
    with pytest.raises(SshError, match="not on the planned HCAs after 0s"):
        provider.wait(target, {**props(), "timeout_s": 0.0})


def test_a_served_model_without_an_api_key_is_no_missing_input() -> None:
    """A stack that sets no sparkrack:apiKey (gb10-16 as shipped): the engine drops the None."""
    from sparkrack.resources.engine import ServedModelProvider

    props = {"node": "spark-1", "connection": {}, "user": "u", "container": "vllm", "port": 8000}
    props |= {"model": "m", "timeout_s": 1.0}
    checked = ServedModelProvider().check({}, props)
    assert not [f for f in checked.failures if f.property == "key_secret"]

"""The program keeps the Pulumi SDK's debug lines from the engine, and sends it everything else."""

from __future__ import annotations

from typing import Any

import pytest
from pulumi import log
from pulumi.runtime import settings
from pulumi.runtime.proto import engine_pb2

from sparkrack.config import speedups
from sparkrack.runtime import sdk_debug

pytestmark = pytest.mark.unit


class Engine:
    """What the program's engine client is to the SDK's log: something with Log."""

    def __init__(self) -> None:
        self.sent: list[Any] = []

    def Log(self, request: Any) -> None:  # the gRPC method's name
        self.sent.append((request.severity, request.message))


@pytest.fixture
def engine(monkeypatch: pytest.MonkeyPatch) -> Engine:
    monkeypatch.delenv(sdk_debug.KEEP_VARIABLE, raising=False)
    client = Engine()
    monkeypatch.setattr(settings, "get_engine", lambda: client)
    return client


def log_every_level() -> None:
    log.debug("registering resource")
    log.info("an info line")
    log.warn("a warning")
    log.error("an error")


def test_debug_lines_stay_in_the_program_and_every_other_reaches_the_engine(engine: Engine) -> None:
    sdk_debug.drop_sdk_debug_lines()
    log_every_level()
    assert engine.sent == [
        (engine_pb2.INFO, "an info line"),
        (engine_pb2.WARNING, "a warning"),
        (engine_pb2.ERROR, "an error"),
    ]


def test_dropping_twice_wraps_the_client_once(engine: Engine) -> None:
    sdk_debug.drop_sdk_debug_lines()
    once = engine.Log
    sdk_debug.drop_sdk_debug_lines()
    assert engine.Log is once


def test_the_variable_keeps_the_debug_lines(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(sdk_debug.KEEP_VARIABLE, "1")
    sdk_debug.drop_sdk_debug_lines()
    log_every_level()
    assert [severity for severity, _ in engine.sent] == [
        engine_pb2.DEBUG,
        engine_pb2.INFO,
        engine_pb2.WARNING,
        engine_pb2.ERROR,
    ]


def test_an_sdk_without_the_debug_severity_is_left_as_it_is_with_one_warning(
    engine: Engine, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delattr(engine_pb2, "DEBUG")
    before = engine.Log
    sdk_debug.drop_sdk_debug_lines()
    assert engine.Log == before
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("warning: sparkrack leaves the Pulumi SDK's debug lines as it is")


def test_the_speedups_switch_keeps_the_debug_lines(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(speedups.VARIABLE, "off")
    sdk_debug.drop_sdk_debug_lines()
    log.debug("registering resource")
    assert [severity for severity, _ in engine.sent] == [engine_pb2.DEBUG]

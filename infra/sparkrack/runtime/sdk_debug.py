"""The Pulumi SDK's own debug lines, kept out of the program's path (why, measured: docs/speed.md,
"The SDK's debug lines"); SPARKRACK_SDK_DEBUG=1 or SPARKRACK_SPEEDUPS=off keeps them. The program
sends the engine every other message as the SDK does."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from pulumi.runtime import settings
from pulumi.runtime.proto import engine_pb2

from sparkrack.config.speedups import speedups_on
from sparkrack.runtime.sdk_shape import skipped

KEEP_VARIABLE = "SPARKRACK_SDK_DEBUG"


def without_debug_lines(send: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """The engine client's Log, less its debug-level requests."""

    def log(request: Any) -> Any:
        return None if request.severity == engine_pb2.DEBUG else send(request)

    log.drops_debug_lines = True  # type: ignore[attr-defined]
    return log


def shape_problem(engine: Any) -> str | None:
    """What differs from the SDK this was written for: a Log request with a severity, DEBUG among
    them, and an engine client with a Log method."""
    request = getattr(engine_pb2, "LogRequest", None)
    fields = getattr(getattr(request, "DESCRIPTOR", None), "fields_by_name", {})
    if not hasattr(engine_pb2, "DEBUG") or "severity" not in fields:
        return "its engine LogRequest has no DEBUG severity"
    if not callable(getattr(engine, "Log", None)):
        return "its engine client has no Log method"
    return None


def drop_sdk_debug_lines() -> None:
    """From here on the program's debug-level lines stay in the program, unless asked for. The
    engine's client is one object for the whole program, whichever context a registration runs in
    (the unit tests' mock engine is wrapped alike)."""
    get_engine = getattr(settings, "get_engine", None)
    if not callable(get_engine):
        skipped("debug lines", "it has no settings.get_engine")
        return
    engine = get_engine()
    if engine is None or os.environ.get(KEEP_VARIABLE) == "1" or not speedups_on():
        return
    if skipped("debug lines", shape_problem(engine)):
        return
    if not getattr(engine.Log, "drops_debug_lines", False):
        engine.Log = without_debug_lines(engine.Log)

"""The Pulumi SDK's own debug lines, kept out of the program's path unless asked for.

The Python SDK logs five debug lines for each resource it registers ("beginning rpc", "preparing
resource", ...), each a blocking gRPC call to the engine made on the program's event loop, which
waits for it. On sim-16 that is about 3,000 round trips per preview or up, spent before a
resource reaches the engine, for lines that `pulumi --debug` alone would show. The program sends
the engine every other message as the SDK does; SPARKRACK_SDK_DEBUG=1 keeps the debug lines too.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from pulumi.runtime import settings
from pulumi.runtime.proto import engine_pb2

KEEP_VARIABLE = "SPARKRACK_SDK_DEBUG"


def without_debug_lines(send: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """The engine client's Log, less its debug-level requests."""

    def log(request: Any) -> Any:
        return None if request.severity == engine_pb2.DEBUG else send(request)

    log.drops_debug_lines = True  # type: ignore[attr-defined]
    return log


def drop_sdk_debug_lines() -> None:
    """From here on the program's debug-level lines stay in the program, unless the variable asks
    for them. The engine's client is one object for the whole program, whichever context a
    registration runs in (the unit tests' mock engine is wrapped alike)."""
    engine = settings.get_engine()
    if engine is None or os.environ.get(KEEP_VARIABLE) == "1":
        return
    if not getattr(engine.Log, "drops_debug_lines", False):
        engine.Log = without_debug_lines(engine.Log)

"""A dynamic resource whose create returns only once PARTIES creates are in the provider host at
the same time: a host serving fewer operations at once breaks the barrier and fails them all.

It lives beside the program, not in __main__, so the provider is pickled by reference and every
create in the host meets at the one barrier of this module."""

from __future__ import annotations

import threading
from typing import Any

from pulumi.dynamic import CreateResult, ResourceProvider

PARTIES = 8
WAIT_S = 60.0
_MET = threading.Barrier(PARTIES)


class Gate(ResourceProvider):
    serialize_as_secret_always = False

    def create(self, props: dict[str, Any]) -> CreateResult:
        try:
            _MET.wait(timeout=WAIT_S)
        except threading.BrokenBarrierError as error:
            message = f"{props['name']}: fewer than {PARTIES} operations at once in {WAIT_S}s"
            raise RuntimeError(message) from error
        return CreateResult(props["name"], props)

"""sparkrack's provider host: Pulumi's dynamic-provider host with a wider server pool."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from sparkrack.runtime import provider_host

pytestmark = pytest.mark.unit


def test_the_server_gets_a_pool_of_operations_threads_for_pulumis_four(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    made: dict[str, Any] = {}

    def server(pool: ThreadPoolExecutor, *args: Any, **kwargs: Any) -> str:
        made.update(pool=pool, args=args, kwargs=kwargs)
        return "server"

    monkeypatch.setattr(provider_host, "_GRPC_SERVER", server)
    pulumis_pool = ThreadPoolExecutor(max_workers=4)

    assert provider_host.wide_server(pulumis_pool, options=[("a", 1)]) == "server"
    assert made["pool"]._max_workers == provider_host.OPERATIONS > 4
    assert made["kwargs"] == {"options": [("a", 1)]}

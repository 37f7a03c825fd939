"""The process sparkrack's resources run in: Pulumi's own dynamic-provider host (`python -m
pulumi.dynamic`), its gRPC server given a pool wide enough that the engine's `--parallel`, not the
host's 4 threads, bounds the operations in flight (docs/speed.md, "The provider host's pool").

Everything else is Pulumi's host, unchanged: the engine runs this module through
tools/provider-host/pulumi-resource-pulumi-python, which Pulumi.yaml declares as the project's
`pulumi-python` provider plugin.
"""

from __future__ import annotations

import runpy
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc

# Threads start only when operations arrive, so a wide pool costs nothing idle; the engine's
# --parallel is what bounds the operations in flight.
OPERATIONS = 256
_GRPC_SERVER = grpc.server


def wide_server(_thread_pool: Any, *args: Any, **kwargs: Any) -> grpc.Server:
    """grpc.server as Pulumi's host calls it, with a pool of OPERATIONS threads for its 4."""
    return _GRPC_SERVER(ThreadPoolExecutor(max_workers=OPERATIONS), *args, **kwargs)


def main() -> None:
    grpc.server = wide_server  # only this process, which serves nothing else
    runpy.run_module("pulumi.dynamic", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()

"""The process sparkrack's resources run in: Pulumi's own dynamic-provider host (`python -m
pulumi.dynamic`), serving as many operations at once as the engine sends.

Pulumi's host hands its gRPC server a pool of 4 threads, so a refresh of sixteen nodes read at
most four resources at a time whatever the engine's `--parallel` said (issue 18 measured 4, 8
and 64 alike). Here the server gets a pool wide enough that the engine's `--parallel` (by default
four per CPU) is the only bound. Everything else is Pulumi's host, unchanged: the engine runs this
module through tools/provider-host/pulumi-resource-pulumi-python, which Pulumi.yaml declares as
the project's `pulumi-python` provider plugin.
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

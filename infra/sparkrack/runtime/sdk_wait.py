"""The end of the program waits for its outputs once each, not once per output that completes.

When the program returns, the Pulumi SDK (3.272, `pulumi.runtime.stack.wait_for_rpcs`) waits for
every output still pending with `asyncio.wait(all_pending, FIRST_COMPLETED)` in a loop: each
round adds a done-callback to every pending output and removes it again, so n outputs completing
one by one cost n(n+1)/2 callbacks (300: 45,150). A sim-16 program's ~600 resources leave
thousands of outputs pending when it returns, resolved one by one as the engine answers. Here
every pending output gets one callback (`asyncio.wait(..., FIRST_EXCEPTION)`), the first failure
is raised as soon as its task is done, as the SDK raises it, and outputs made meanwhile are
waited for in the next round. The RPCs are awaited with the SDK's own code.
SPARKRACK_SDK_WAIT=sdk keeps the SDK's wait.
"""

from __future__ import annotations

import asyncio
import os

from pulumi.runtime import stack
from pulumi.runtime.settings import SETTINGS, _get_rpc_manager

KEEP_VARIABLE = "SPARKRACK_SDK_WAIT"
SDK_WAIT_FOR_RPCS = stack.wait_for_rpcs


async def wait_for_outputs() -> None:
    """Every output the SDK tracks done, those made while waiting too; the first to fail raises
    (the SDK keeps a failed or cancelled output tracked and drops a succeeded one)."""
    while True:
        with SETTINGS.lock:
            pending = list(SETTINGS.outputs)
            SETTINGS.outputs.clear()
        if not pending:
            return
        done, _ = await asyncio.wait(pending, return_when=asyncio.FIRST_EXCEPTION)
        for task in done:
            await task  # a failure raises here, with its own traceback


async def wait_for_rpcs(await_all_outstanding_tasks: bool = True) -> None:
    """The SDK's wait_for_rpcs, same contract: RPCs, then outputs, again while outputs queued
    more RPCs."""
    while True:
        await SDK_WAIT_FOR_RPCS(await_all_outstanding_tasks=False)
        if await_all_outstanding_tasks:
            await wait_for_outputs()
        if not _get_rpc_manager().rpcs:
            return


def wait_linearly() -> None:
    """From here on the program's end waits as above, unless the variable asks for the SDK's.
    Pulumi's run_pulumi_func looks the function up when the program has returned."""
    if os.environ.get(KEEP_VARIABLE) == "sdk":
        return
    stack.wait_for_rpcs = wait_for_rpcs

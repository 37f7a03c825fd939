"""The end of the program waits for its outputs once each, not once per output that completes
(why, measured: docs/speed.md, "The SDK's wait for outputs"); SPARKRACK_SDK_WAIT=sdk or
SPARKRACK_SPEEDUPS=off keeps the SDK's wait.

Every output the SDK still tracks when the program returns gets one callback
(`asyncio.wait(..., FIRST_EXCEPTION)`), the first failure is raised as soon as its task is done,
as the SDK raises it, and outputs made meanwhile are waited for in the next round. The RPCs are
awaited with the SDK's own code.
"""

from __future__ import annotations

import asyncio
import inspect
import os
from typing import Any

from pulumi.runtime import settings, stack

from sparkrack.config.speedups import speedups_on
from sparkrack.runtime.sdk_shape import skipped

KEEP_VARIABLE = "SPARKRACK_SDK_WAIT"
SDK_WAIT_FOR_RPCS: Any = getattr(stack, "wait_for_rpcs", None)


async def wait_for_outputs() -> None:
    """Every output the SDK tracks done, those made while waiting too; the first to fail raises
    (the SDK keeps a failed or cancelled output tracked and drops a succeeded one)."""
    tracked = settings.SETTINGS
    while True:
        with tracked.lock:
            pending = list(tracked.outputs)
            tracked.outputs.clear()
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
        if not settings._get_rpc_manager().rpcs:
            return


def shape_problem() -> str | None:
    """What differs from the SDK this was written for: the coroutine it replaces, with its
    argument, and the tracked outputs and RPC manager it reads."""
    sdk_wait = getattr(stack, "wait_for_rpcs", None)
    if not inspect.iscoroutinefunction(sdk_wait) or SDK_WAIT_FOR_RPCS is None:
        return "stack.wait_for_rpcs is not a coroutine function"
    if "await_all_outstanding_tasks" not in inspect.signature(sdk_wait).parameters:
        return "stack.wait_for_rpcs takes no await_all_outstanding_tasks"
    tracked = getattr(settings, "SETTINGS", None)
    if not (hasattr(tracked, "outputs") and hasattr(tracked, "lock")):
        return "settings.SETTINGS tracks no outputs under a lock"
    if not callable(getattr(settings, "_get_rpc_manager", None)):
        return "settings has no _get_rpc_manager"
    return None


def wait_linearly() -> None:
    """From here on the program's end waits as above, unless asked for the SDK's. Pulumi's
    run_pulumi_func looks the function up when the program has returned."""
    if os.environ.get(KEEP_VARIABLE) == "sdk" or not speedups_on():
        return
    if skipped("wait for outputs", shape_problem()):
        return
    stack.wait_for_rpcs = wait_for_rpcs

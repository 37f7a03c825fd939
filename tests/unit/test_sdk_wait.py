"""The program's end waits for every output once, raises the first failure, picks up late ones."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest
from pulumi.runtime import settings, stack
from pulumi.runtime.rpc_manager import RPCManager
from pulumi.runtime.settings import SETTINGS

from sparkrack.config import speedups
from sparkrack.runtime import sdk_wait

pytestmark = pytest.mark.unit


def in_a_fresh_program(body: Callable[[], Awaitable[Any]]) -> Any:
    """Run `body` on a loop of its own with the SDK's tracked outputs and RPCs its own (context
    variables: set inside the run's task, they end with it). The thread's current loop, which the
    program tests' mocks use, is left alone."""

    async def program() -> Any:
        SETTINGS.outputs = set()
        SETTINGS.rpc_manager = RPCManager()  # type: ignore[no-untyped-call]
        return await asyncio.wait_for(body(), timeout=10)

    loop = asyncio.new_event_loop()  # not asyncio.run: that leaves the thread without a loop
    try:
        return loop.run_until_complete(program())
    finally:
        loop.close()


def track(coroutine: Awaitable[Any]) -> asyncio.Future[Any]:
    """A task the SDK tracks, as an Output's data is."""
    task = asyncio.ensure_future(coroutine)
    with SETTINGS.lock:
        SETTINGS.outputs.add(task)
    return task


def test_outputs_made_while_waiting_are_waited_for_too() -> None:
    finished: list[str] = []

    async def late() -> None:
        await asyncio.sleep(0.01)
        finished.append("late")

    async def early() -> None:
        await asyncio.sleep(0.01)
        track(late())  # an apply that makes another output when it runs
        finished.append("early")

    async def body() -> None:
        track(early())
        await sdk_wait.wait_for_outputs()

    in_a_fresh_program(body)
    assert finished == ["early", "late"]


def test_the_first_failure_is_raised_without_waiting_for_the_rest() -> None:
    async def fails() -> None:
        await asyncio.sleep(0.01)
        raise ValueError("node spark-2: no answer")

    async def body() -> None:
        track(asyncio.Event().wait())  # never done: the wait must not need it
        track(fails())
        await sdk_wait.wait_for_outputs()

    with pytest.raises(ValueError, match="spark-2: no answer"):
        in_a_fresh_program(body)


def test_rpcs_queued_by_outputs_are_awaited_then_their_outputs() -> None:
    finished: list[str] = []

    async def rpc() -> None:
        await asyncio.sleep(0.01)
        finished.append("rpc")
        track(output("after the rpc"))

    async def output(name: str) -> None:
        await asyncio.sleep(0.01)
        finished.append(name)

    async def registers() -> None:
        await asyncio.sleep(0.01)
        finished.append("output")
        SETTINGS.rpc_manager.rpcs.append(asyncio.ensure_future(rpc()))

    async def body() -> None:
        track(registers())
        await sdk_wait.wait_for_rpcs()

    in_a_fresh_program(body)
    assert finished == ["output", "rpc", "after the rpc"]


class CountingTask(asyncio.Future[None]):
    """A future that counts the done-callbacks added to it."""

    added = 0

    def add_done_callback(self, fn: Any, *, context: Any = None) -> None:
        CountingTask.added += 1
        super().add_done_callback(fn, context=context)


async def complete_one_by_one(futures: list[CountingTask]) -> None:
    """One future done at a time, the loop let run between them (no clock: the same count under
    any load)."""
    for future in futures:
        future.set_result(None)
        for _ in range(5):
            await asyncio.sleep(0)


@pytest.mark.parametrize("wait", ["sdk", "sparkrack"])
def test_each_output_is_given_a_callback_once_not_once_per_completion(wait: str) -> None:
    CountingTask.added = 0

    async def body() -> None:
        loop = asyncio.get_running_loop()
        futures = [CountingTask(loop=loop) for _ in range(300)]
        with SETTINGS.lock:
            SETTINGS.outputs.update(futures)
        driver = asyncio.ensure_future(complete_one_by_one(futures))
        if wait == "sdk":
            await sdk_wait.SDK_WAIT_FOR_RPCS()
        else:
            await sdk_wait.wait_for_rpcs()
        await driver

    in_a_fresh_program(body)
    assert CountingTask.added == (45_150 if wait == "sdk" else 300)


@pytest.fixture
def sdk_function() -> Iterator[None]:
    """The SDK's function in place (a program test in this process may have installed ours)."""
    before = stack.wait_for_rpcs
    stack.wait_for_rpcs = sdk_wait.SDK_WAIT_FOR_RPCS
    yield
    stack.wait_for_rpcs = before


def test_installed_unless_the_variable_keeps_the_sdks(
    sdk_function: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(sdk_wait.KEEP_VARIABLE, "sdk")
    sdk_wait.wait_linearly()
    assert stack.wait_for_rpcs is sdk_wait.SDK_WAIT_FOR_RPCS
    monkeypatch.delenv(sdk_wait.KEEP_VARIABLE)
    sdk_wait.wait_linearly()
    sdk_wait.wait_linearly()
    assert stack.wait_for_rpcs is sdk_wait.wait_for_rpcs


def sdk_without_the_argument() -> None:
    """A wait_for_rpcs of another shape: a later SDK's, say."""


@pytest.mark.parametrize(
    ("name", "holder", "changed"),
    [
        ("wait_for_rpcs", stack, sdk_without_the_argument),
        ("SETTINGS", settings, object()),
        ("_get_rpc_manager", settings, None),
    ],
)
def test_an_sdk_of_another_shape_is_left_as_it_is_with_one_warning(
    sdk_function: None,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    name: str,
    holder: Any,
    changed: Any,
) -> None:
    monkeypatch.delenv(sdk_wait.KEEP_VARIABLE, raising=False)
    monkeypatch.setattr(holder, name, changed)
    before = stack.wait_for_rpcs
    sdk_wait.wait_linearly()
    assert stack.wait_for_rpcs is before
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("warning: sparkrack leaves the Pulumi SDK's wait for outputs as it is")


def test_the_speedups_switch_keeps_the_sdks_wait(
    sdk_function: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(sdk_wait.KEEP_VARIABLE, raising=False)
    monkeypatch.setenv(speedups.VARIABLE, "off")
    sdk_wait.wait_linearly()
    assert stack.wait_for_rpcs is sdk_wait.SDK_WAIT_FOR_RPCS

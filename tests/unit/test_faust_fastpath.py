"""The eager per-message ``wait_first`` of Faust's consumer (streams.live.faust_fastpath)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from mode import Service

from streams.live.faust_fastpath import eager_wait_first


class Waiter(Service):
    """A bare mode service with the consumer's ``suspend_flow``: what ``wait_first`` needs."""

    def __init__(self) -> None:
        super().__init__()
        self.suspend_flow = asyncio.Event()


def run_counting_tasks(body: Callable[[Waiter], Any]) -> tuple[Any, int]:
    """``body(service)`` on a fresh loop; returns its result and how many tasks were made."""
    made = [0]

    def factory(loop: asyncio.AbstractEventLoop, coro: Any, **kw: Any) -> asyncio.Task[Any]:
        made[0] += 1
        return asyncio.Task(coro, loop=loop, **kw)

    async def main() -> Any:
        asyncio.get_running_loop().set_task_factory(factory)  # type: ignore[arg-type]
        service = Waiter()
        made[0] = 0
        result = await body(service)
        return result, made[0]  # not asyncio.run's own shutdown tasks

    result: tuple[Any, int] = asyncio.run(main())
    return result


def test_a_callback_that_does_not_suspend_makes_no_task() -> None:
    suspend = asyncio.Event

    async def body(s: Waiter) -> Any:
        flow = suspend()
        seen: list[int] = []

        async def callback(n: int) -> int:
            seen.append(n)
            return n * 2

        res = await eager_wait_first(s, callback(21), flow.wait())
        return res, seen

    (res, seen), tasks = run_counting_tasks(body)
    assert seen == [21] and res.results == [42] and not res.stopped
    assert tasks == 0  # Faust's own wait_first makes four per message


def test_a_suspended_callback_finishes_as_a_task_with_its_result_and_errors() -> None:
    async def body(s: Waiter) -> Any:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[int] = loop.create_future()

        async def callback() -> int:
            await asyncio.sleep(0)
            return await fut + 1

        loop.call_later(0.01, fut.set_result, 41)
        ok = await eager_wait_first(s, callback(), asyncio.Event().wait())

        bad: asyncio.Future[int] = loop.create_future()

        async def failing() -> int:
            return await bad

        loop.call_later(0.01, bad.set_exception, ValueError("boom"))
        with pytest.raises(ValueError, match="boom"):
            await eager_wait_first(s, failing(), asyncio.Event().wait())
        return ok

    ok, _ = run_counting_tasks(body)
    assert ok.results[0] == 42


def test_a_suspend_while_the_callback_waits_interrupts_it() -> None:
    """A rebalance sets ``suspend_flow``: the wait returns and the blocked callback is cancelled,
    as with Faust's own ``wait_first``."""

    async def body(s: Waiter) -> Any:
        loop = asyncio.get_running_loop()
        flow = asyncio.Event()
        cancelled: list[bool] = []

        async def blocked() -> None:
            try:
                await loop.create_future()  # a full stream buffer that never drains
            except asyncio.CancelledError:
                cancelled.append(True)
                raise

        loop.call_later(0.01, flow.set)
        res = await eager_wait_first(s, blocked(), flow.wait())
        await asyncio.sleep(0.01)
        return res, cancelled

    (res, cancelled), _ = run_counting_tasks(body)
    assert res.results == [True] and cancelled == [True]


def test_an_error_raised_before_suspending_propagates() -> None:
    async def body(s: Waiter) -> None:
        async def callback() -> None:
            raise KeyError("unknown partition")

        await eager_wait_first(s, callback(), asyncio.Event().wait())

    with pytest.raises(KeyError):
        run_counting_tasks(body)


def test_while_the_flow_is_suspended_faust_decides() -> None:
    """During a rebalance nothing is stepped inline: the callback starts only after what the
    loop had ready (rebalance handlers), as in Faust's own wait, which returns on the suspend."""

    async def body(s: Waiter) -> Any:
        s.suspend_flow.set()
        order: list[str] = []

        async def callback() -> None:
            order.append("callback")
            await asyncio.sleep(0.05)
            order.append("delivered")

        asyncio.get_running_loop().call_soon(order.append, "ready before")
        res = await eager_wait_first(s, callback(), s.suspend_flow.wait())
        await asyncio.sleep(0.1)
        return res, order

    (res, order), _ = run_counting_tasks(body)
    assert res.results == [True] and order == ["ready before", "callback"]


def test_each_message_still_takes_one_loop_turn() -> None:
    """What the loop had ready runs before the next message (rebalance handlers interleave)."""

    async def body(s: Waiter) -> list[str]:
        order: list[str] = []

        async def callback() -> None:
            order.append("callback")

        asyncio.get_running_loop().call_soon(order.append, "ready before")
        await eager_wait_first(s, callback(), s.suspend_flow.wait())
        order.append("next message")
        return order

    order, tasks = run_counting_tasks(body)
    assert order == ["callback", "ready before", "next message"] and tasks == 0

"""Issue 24: an agent batch that hits an infrastructure error is run again, never acked half
done; after the last try the worker stops without acking it. Pure logic (no broker)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest

from streams.live.agents.context import AgentContext
from streams.live.batch_guard import EXIT_STUCK, BatchGuard, backoff_s
from streams.live.sends import (
    ATTEMPT_HEADER,
    BATCH_ATTEMPT,
    DeliveryFailed,
    LibrdkafkaSender,
    attempt_headers,
)


class Halted(Exception):
    pass


def guard(attempts: int, waits: list[float], halts: list[int]) -> BatchGuard:
    async def sleep(s: float) -> None:
        waits.append(s)

    def halt(status: int) -> None:
        halts.append(status)
        raise Halted

    return BatchGuard("verify", attempts, 0.5, 4.0, halt=halt, sleep=sleep)


def test_a_failed_delivery_reruns_the_whole_batch_until_it_succeeds() -> None:
    waits: list[float] = []
    halts: list[int] = []
    g = guard(8, waits, halts)
    runs: list[bool] = []
    seen_ready: list[bool] = []

    async def batch() -> None:
        runs.append(True)
        seen_ready.append(g.finishing)
        if len(runs) < 4:
            raise DeliveryFailed("MSG_SIZE_TOO_LARGE")

    asyncio.run(g.run(batch))
    assert len(runs) == 4 and halts == [] and g.retries == 3
    assert waits == [0.5, 1.0, 2.0]
    assert seen_ready == [True, False, False, False]  # not ready while a batch is rerun
    assert g.finishing


def test_the_last_failed_try_stops_the_worker_without_acking() -> None:
    waits: list[float] = []
    halts: list[int] = []
    g = guard(3, waits, halts)

    async def batch() -> None:
        raise DeliveryFailed("broker unreachable")

    with pytest.raises(Halted):
        asyncio.run(g.run(batch))
    assert halts == [EXIT_STUCK] and waits == [0.5, 1.0] and not g.finishing


def test_a_bug_is_not_retried() -> None:
    g = guard(8, [], [])
    runs: list[int] = []

    async def batch() -> None:
        runs.append(1)
        raise ZeroDivisionError

    with pytest.raises(ZeroDivisionError):
        asyncio.run(g.run(batch))
    assert runs == [1]


def test_backoff_doubles_up_to_its_cap() -> None:
    assert [backoff_s(a, 0.5, 4.0) for a in range(1, 7)] == [0.5, 1, 2, 4, 4, 4]
    with pytest.raises(ValueError):
        BatchGuard("x", 0)


def test_each_agent_settles_only_its_own_deliveries() -> None:
    """Two agents (two tasks) on one context: agent B's settle neither waits for nor takes
    agent A's delivery, and A is not acked until its own delivery is done (the bug of 64ae7bf,
    reopened across agents while the pending lists were shared)."""

    async def body() -> None:
        ctx = AgentContext(None, None, None, {}, {}, None, None)  # type: ignore[arg-type]
        loop = asyncio.get_running_loop()
        slow: asyncio.Future[None] = loop.create_future()
        done: asyncio.Future[None] = loop.create_future()
        done.set_result(None)
        a_sent, b_settled = asyncio.Event(), asyncio.Event()
        acked: list[str] = []

        async def one(name: str) -> Any:
            yield [1]
            acked.append(name)  # Faust acks when the batch iterator is resumed

        async def agent_a() -> None:
            settled = ctx._settled(one("a"))
            await settled.__anext__()
            ctx.pending().dead.append(slow)  # in flight while B finishes its batch
            a_sent.set()
            await b_settled.wait()
            with contextlib.suppress(StopAsyncIteration):
                await settled.__anext__()

        async def agent_b() -> None:
            await a_sent.wait()
            settled = ctx._settled(one("b"))
            await settled.__anext__()
            ctx.pending().dead.append(done)
            with contextlib.suppress(StopAsyncIteration):
                await settled.__anext__()
            b_settled.set()

        a = asyncio.ensure_future(agent_a())
        await asyncio.wait_for(agent_b(), timeout=2)  # B never waits on A's delivery
        await asyncio.sleep(0.05)
        assert acked == ["b"] and not a.done()  # A is held by its own delivery
        slow.set_result(None)
        await asyncio.wait_for(a, timeout=2)
        assert acked == ["b", "a"]

    asyncio.run(body())


def test_a_retry_marks_its_sends_with_the_try_number() -> None:
    """A retry re-sends what the failed try delivered: its messages say which try sent them,
    the first try's carry no header (nothing to pay on the usual path)."""
    g = guard(8, [], [])
    seen: list[Any] = []

    async def batch() -> None:
        seen.append(attempt_headers())
        if len(seen) < 3:
            raise DeliveryFailed("timed out")

    asyncio.run(g.run(batch))
    assert seen == [None, [(ATTEMPT_HEADER, b"2")], [(ATTEMPT_HEADER, b"3")]]
    assert attempt_headers() is None  # outside a batch (and after it): the first try's


def test_librdkafka_sends_carry_the_retry_header() -> None:
    """The header reaches the producer call (the agents' default sender)."""
    produced: list[dict[str, Any]] = []

    class Recording:
        def produce(self, *args: Any, **kwargs: Any) -> None:
            produced.append(kwargs)

    sender = LibrdkafkaSender.__new__(LibrdkafkaSender)
    sender._started = lambda: Recording()  # type: ignore[method-assign]
    sender.settings = type("S", (), {"topic": staticmethod(lambda t: f"p.{t}")})()
    sender._reports = None  # type: ignore[assignment]

    async def two_tries() -> None:
        await sender.send("verified", b"1", b"v", 5)
        token = BATCH_ATTEMPT.set(2)
        try:
            await sender.send("verified", b"1", b"v", 5)
        finally:
            BATCH_ATTEMPT.reset(token)

    asyncio.run(two_tries())
    assert [p["headers"] for p in produced] == [None, [(ATTEMPT_HEADER, b"2")]]

"""Dead letters and table updates are delivered before Faust acks their batch
(``AgentContext.batches``).

Faust's ``take_events`` acks a batch's events when it is resumed for the next batch, so the
wrapper must await the batch's dead-letter and changelog deliveries before resuming it; else a
crash right after could commit an event whose dead letter never reached the broker, or whose
table update the partition's next owner never sees (Faust's own commit only *tries* to flush
its send buffer). The end-to-end table case is ``tests/integration/test_changelog_durability.py``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from streams.live.agents.context import AgentContext


def bare_context() -> AgentContext:
    """Only the fields the batch wrapper uses (pure logic: no app, no broker)."""
    return AgentContext(None, None, None, {}, {}, None, None)  # type: ignore[arg-type]


def numbered_batches(acked: list[int], count: int = 2) -> AsyncIterator[list[Any]]:
    """Batches ``[1]``, ``[2]``, …; resuming after batch n records it as acked, as Faust does."""

    async def take_events() -> AsyncIterator[list[Any]]:
        for n in range(1, count + 1):
            yield [n]
            acked.append(n)

    return take_events()


class FakeTable:
    """Faust's ``Table.send_changelog`` shape: returns the message's delivery future."""

    def __init__(self) -> None:
        self.sent: list[tuple[Any, ...]] = []
        self.deliveries: list[asyncio.Future[None]] = []

    def send_changelog(self, partition: int, key: Any, value: Any) -> asyncio.Future[None]:
        self.sent.append((partition, key, value))
        delivery: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.deliveries.append(delivery)
        return delivery


async def _held_until_delivered(
    ctx: AgentContext, send: Callable[[], asyncio.Future[None]], pending: Callable[[], list[Any]]
) -> None:
    """Batch 1 is not acked while what ``send`` sent during it is in flight; it is once it
    is delivered, and nothing is left pending."""
    acked: list[int] = []
    batches = ctx._settled(numbered_batches(acked))
    assert await batches.__anext__() == [1]
    delivery = send()  # sent while batch 1 is processed
    nxt = asyncio.ensure_future(batches.__anext__())
    await asyncio.sleep(0.05)
    assert acked == [] and not nxt.done()
    delivery.set_result(None)
    assert await nxt == [2]
    assert acked == [1] and pending() == []


def test_next_batch_is_taken_only_after_the_dead_letters_are_delivered() -> None:
    async def body() -> None:
        ctx = bare_context()

        def dead_letter() -> asyncio.Future[None]:
            delivery: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            ctx.pending().dead.append(delivery)
            return delivery

        await _held_until_delivered(ctx, dead_letter, lambda: ctx.pending().dead)

    asyncio.run(body())


def test_next_batch_is_taken_only_after_the_table_updates_are_delivered() -> None:
    async def body() -> None:
        ctx, table = bare_context(), FakeTable()
        ctx.record_changelog(table)

        def update() -> asyncio.Future[None]:
            returned = table.send_changelog(0, b"u1", b"state")  # what Table.__setitem__ calls
            assert returned is table.deliveries[-1] and table.sent[-1] == (0, b"u1", b"state")
            return returned

        await _held_until_delivered(ctx, update, lambda: ctx.pending().changelog)

    asyncio.run(body())


def test_a_failed_dead_letter_delivery_raises_before_the_batch_is_acked() -> None:
    async def body() -> None:
        ctx, acked = bare_context(), []

        async def refused() -> None:
            raise RuntimeError("broker refused the dead letter")

        batches = ctx._settled(numbered_batches(acked, 1))
        await batches.__anext__()
        ctx.pending().dead.append(refused())
        with pytest.raises(RuntimeError, match="refused"):
            await batches.__anext__()
        assert acked == []

    asyncio.run(body())


def test_a_failed_changelog_delivery_raises_before_the_batch_is_acked() -> None:
    async def body() -> None:
        ctx, table, acked = bare_context(), FakeTable(), []
        ctx.record_changelog(table)
        batches = ctx._settled(numbered_batches(acked, 1))
        await batches.__anext__()
        table.send_changelog(1, b"u2", b"state")
        table.deliveries[0].set_exception(RuntimeError("broker refused the changelog message"))
        with pytest.raises(RuntimeError, match="refused"):
            await batches.__anext__()
        assert acked == []

    asyncio.run(body())

"""Dead letters are delivered before Faust acks their batch (``AgentContext.batches``).

Faust's ``take_events`` acks a batch's events when it is resumed for the next batch, so the
wrapper must await the batch's dead-letter deliveries before resuming it; else a crash right
after could commit an event whose dead letter never reached the broker.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from streams.live.agents.context import AgentContext


def bare_context() -> AgentContext:
    """Only the fields the batch wrapper uses (pure logic: no app, no broker)."""
    return AgentContext(None, None, None, {}, {}, None, None)  # type: ignore[arg-type]


def test_next_batch_is_taken_only_after_the_dead_letters_are_delivered() -> None:
    async def body() -> None:
        ctx = bare_context()
        log: list[str] = []
        delivery: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        async def take_events() -> AsyncIterator[list[Any]]:
            for n in (1, 2):
                yield [n]
                log.append(f"acked {n}")  # what Faust does on resuming take_events

        batches = ctx._settled(take_events())
        assert await batches.__anext__() == [1]
        ctx.dead_deliveries.append(delivery)  # a dead letter sent while batch 1 is processed
        nxt = asyncio.ensure_future(batches.__anext__())
        await asyncio.sleep(0.05)
        assert log == [] and not nxt.done()  # batch 1 not acked while its dead letter is in flight
        delivery.set_result(None)
        assert await nxt == [2]
        assert log == ["acked 1"] and ctx.dead_deliveries == []

    asyncio.run(body())


def test_a_failed_dead_letter_delivery_raises_before_the_batch_is_acked() -> None:
    async def body() -> None:
        ctx = bare_context()
        acked: list[int] = []

        async def take_events() -> AsyncIterator[list[Any]]:
            yield [1]
            acked.append(1)

        async def refused() -> None:
            raise RuntimeError("broker refused the dead letter")

        batches = ctx._settled(take_events())
        await batches.__anext__()
        ctx.dead_deliveries.append(refused())
        with pytest.raises(RuntimeError, match="refused"):
            await batches.__anext__()
        assert acked == []

    asyncio.run(body())

"""Table updates reach the changelog before Faust acks their batch (``AgentContext.batches``).

Faust's commit only tries to flush its send buffer (it gives up after 0.1 s without a send), so
the batch wrapper awaits the batch's changelog deliveries itself before ``take_events`` resumes
and acks the events. The end-to-end case (a worker killed right after a commit) is
``tests/integration/test_changelog_durability.py``.
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


def test_next_batch_is_taken_only_after_the_table_updates_are_delivered() -> None:
    async def body() -> None:
        ctx, table = bare_context(), FakeTable()
        ctx.record_changelog(table)
        log: list[str] = []

        async def take_events() -> AsyncIterator[list[Any]]:
            for n in (1, 2):
                yield [n]
                log.append(f"acked {n}")  # what Faust does on resuming take_events

        batches = ctx._settled(take_events())
        assert await batches.__anext__() == [1]
        returned = table.send_changelog(0, b"u1", b"state")  # what Table.__setitem__ calls
        assert returned is table.deliveries[0] and table.sent == [(0, b"u1", b"state")]
        nxt = asyncio.ensure_future(batches.__anext__())
        await asyncio.sleep(0.05)
        assert log == [] and not nxt.done()  # batch 1 not acked while its update is in flight
        table.deliveries[0].set_result(None)
        assert await nxt == [2]
        assert log == ["acked 1"] and ctx.changelog_deliveries == []

    asyncio.run(body())


def test_a_failed_changelog_delivery_raises_before_the_batch_is_acked() -> None:
    async def body() -> None:
        ctx, table = bare_context(), FakeTable()
        ctx.record_changelog(table)
        acked: list[int] = []

        async def take_events() -> AsyncIterator[list[Any]]:
            yield [1]
            acked.append(1)

        batches = ctx._settled(take_events())
        await batches.__anext__()
        table.send_changelog(1, b"u2", b"state")
        table.deliveries[0].set_exception(RuntimeError("broker refused the changelog message"))
        with pytest.raises(RuntimeError, match="refused"):
            await batches.__anext__()
        assert acked == []

    asyncio.run(body())

"""``SOLARIS_CONSUMER_FETCH_MIN_BYTES`` / ``_MAX_WAIT_MS`` reach the fetcher of the consumer
Faust creates for a worker, on the real broker (Faust itself hard-codes 1 byte / 1500 ms)."""

from __future__ import annotations

import faust
import pytest

from streams.live import faust_fetch
from streams.live.components import Components
from streams.settings import Settings
from tests.conftest import require_kafka_and_redis
from tests.unit.test_agents import Sent, run

pytestmark = pytest.mark.integration


def test_the_workers_consumer_fetches_with_the_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    require_kafka_and_redis(Settings())

    async def body(app: faust.App, parts: Components, sent: Sent) -> tuple[int, int]:
        thread = app.consumer._thread  # type: ignore[attr-defined]
        consumer = thread._create_worker_consumer(app.transport)
        await consumer.start()  # aiokafka builds its fetcher from the two values here
        try:
            fetcher = consumer._fetcher
            return fetcher._fetch_min_bytes, fetcher._fetch_max_wait_ms
        finally:
            await consumer.stop()

    try:
        got = run(body, monkeypatch, consumer_fetch_min_bytes=65_536, consumer_fetch_max_wait_ms=7)
        assert got == (65_536, 7)
    finally:
        faust_fetch.install(1, 1500)  # later apps in this process: Faust's own values again

"""A minimal Faust app for the foundation test: one agent, one RocksDB table, writes to Redis.

Run as a real worker process by ``test_faust_worker.py``; all config comes from ``Settings``
(``SOLARIS_*`` env), so the test gives it a unique topic prefix and key prefix.
"""

from __future__ import annotations

import faust
import redis

from streams.settings import Settings

settings = Settings()
datadir = settings.faust_state_root / settings.topic_prefix
datadir.mkdir(parents=True, exist_ok=True)
app = faust.App(
    f"{settings.topic_prefix}-counter",
    broker=f"kafka://{settings.kafka_bootstrap}",
    store="rocksdb://",
    datadir=str(datadir),
    topic_partitions=settings.topic_partitions,
    topic_replication_factor=1,
    web_enabled=False,
    consumer_auto_offset_reset="earliest",
)
clicks = app.topic(settings.topic("clicks"), key_type=bytes, value_type=bytes)
counts = app.Table("counts", default=int, partitions=settings.topic_partitions)
store = redis.Redis.from_url(settings.store_url)


@app.agent(clicks, concurrency=1)
async def count_clicks(stream: faust.StreamT) -> None:
    """Count messages per key in the table and mirror the count to Redis."""
    async for key, _value in stream.items():
        user = key.decode()
        counts[user] += 1
        store.set(f"{settings.key_prefix}:count:{user}", counts[user])

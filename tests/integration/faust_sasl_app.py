"""A tiny Faust app for the credentials test: every message of ``<prefix>.in`` is counted in a
table and echoed (value upper-cased, with its count) to ``<prefix>.out``.

Run as a real worker process by ``test_kafka_sasl.py``. Its only Kafka configuration comes from
``Settings`` (``SOLARIS_*`` env) through :func:`streams.kafka_security.faust_credentials`, the
same call the pipeline's ``create_app`` makes; the table's changelog topic makes Faust create and
write an internal topic with those credentials too.
"""

from __future__ import annotations

import faust

from streams.kafka_security import faust_credentials
from streams.settings import Settings

settings = Settings()
app = faust.App(
    f"{settings.topic_prefix}-sasl",
    broker=f"kafka://{settings.kafka_bootstrap}",
    broker_credentials=faust_credentials(settings),
    store="memory://",
    topic_partitions=1,
    topic_replication_factor=1,
    web_enabled=False,
    consumer_auto_offset_reset="earliest",
)
source = app.topic(
    settings.topic("in"),
    key_type=bytes,
    value_type=bytes,
    key_serializer="raw",
    value_serializer="raw",
)
sink = app.topic(
    settings.topic("out"),
    key_type=bytes,
    value_type=bytes,
    key_serializer="raw",
    value_serializer="raw",
)
counts = app.Table("counts", default=int, partitions=1, key_type=str, value_type=int)


@app.agent(source, concurrency=1)
async def echo(stream: faust.StreamT) -> None:
    """Count per key and echo each value upper-cased with the key's running count."""
    async for key, value in stream.items():
        user = key.decode()
        counts[user] += 1
        await sink.send(key=key, value=value.upper() + b":" + str(counts[user]).encode())

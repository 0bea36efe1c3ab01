"""Issue 24: a batch whose sends the broker refuses is not lost (real broker, Faust worker).

The ``speculated`` topic is made to refuse every message (``max.message.bytes`` 40) while a
speculate worker receives 60 valid requests, then the limit is lifted. Before: the delivery
failure escaped the agent, Faust acked the batch in flight, and its requests were never
speculated. Now the batch guard reruns the whole batch with backoff (``/readyz`` not ready
meanwhile) and every request reaches ``speculated`` once the broker takes writes again, with
the values of one clean try: each rerun starts from the in-process state the batch started from
(:mod:`streams.engine.undo`), so each proposal's recurrence inputs count its request's candidate
list once (every request here is its user's only one, with items no other request has).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from schemas.codec import Codec
from schemas.records import ProposalBatch, RequestEvent
from streams.kafka_clients import make_admin, make_producer
from streams.settings import Settings
from tests.integration.live_harness import Procs, fresh_live_settings, read_topic

pytestmark = [pytest.mark.integration, pytest.mark.slow]
T0 = 1_704_067_200_000


def set_max_message_bytes(settings: Settings, topic: str, value: int) -> None:
    from confluent_kafka.admin import (
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    entry = ConfigEntry(
        "max.message.bytes", str(value), incremental_operation=AlterConfigOpType.SET
    )
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[entry])
    admin = make_admin(settings)
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout=30)


def test_a_refused_batch_is_rerun_not_acked(bundle: Path, tmp_path: Path) -> None:
    from streams.lag import wait_for_groups
    from streams.topics import create_topics

    settings = fresh_live_settings(bundle, agent_batch_attempts=50, agent_batch_max_backoff_s=1.0)
    create_topics(settings)
    speculated = settings.topic("speculated")
    set_max_message_bytes(settings, speculated, 40)
    procs = Procs(settings, tmp_path)
    try:
        procs.start("pipeline", "worker", "--agents", "speculate")
        wait_for_groups(settings, [f"{settings.topic_prefix}-pipeline"], timeout_s=120)
        codec, producer = Codec(), make_producer(settings)
        valid = [
            RequestEvent(f"r{i}", 1 + i, T0 + i, "feed", (100 + i, 400 + i)) for i in range(60)
        ]
        for r in valid:
            producer.produce(
                settings.topic("requests"),
                key=str(r.user_id).encode(),
                value=codec.encode(r),
                timestamp=r.event_time_ms,
            )
        assert producer.flush(30) == 0
        time.sleep(8.0)  # the worker takes the requests and its sends are refused meanwhile
        procs.alive()
        set_max_message_bytes(settings, speculated, 1_048_588)

        batches: list[ProposalBatch] = []
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and len(batches) < len(valid):
            procs.alive()
            batches = [codec.decode(v, ProposalBatch) for _, v in read_topic(settings, speculated)]
            time.sleep(1.0)
        seen = {b.request_id for b in batches}
        assert len(seen) == len(valid), f"{len(seen)} of {len(valid)} requests speculated"
        assert len(batches) == len(valid)  # none delivered twice
        for b in batches:  # counted once, however many tries the batch took
            assert b.pair_counts == (1,) * len(b.item_ids), b
            assert b.prior_counts == pytest.approx([1.0] * len(b.item_ids), rel=1e-3), b
        assert read_topic(settings, settings.topic("dead-letter")) == []
        assert "retrying the whole batch" in procs.log("pipeline")  # it was refused at first
    finally:
        procs.stop_all()

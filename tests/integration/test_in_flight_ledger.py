"""Issue 24 items 2 and 6, live: a pair the FM worker never stored is proposed again once it has
been in flight longer than ``SOLARIS_PAIR_IN_FLIGHT_TIMEOUT_MS``.

The FM worker sheds (``SOLARIS_SHED_CLOCK=wall``) the verified message of a request dated more
than the pair TTL before the wall clock, so none of its pairs is stored and no ``embeddings``
message comes back. The same user's next request, 45 min of event time later (in-flight
timeout 30 min, refresh after 2 h) and recent enough not to be shed, lists the same candidates.

Asserted, in lockstep on the real broker and Redis: the item verified at the first request is
verified again at the second and stored with the second request's event time. Before (the
ledger marked a pair embedded when it was verified) the item stayed marked for 2 h: not
verified again, nothing stored for it.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from schemas.codec import Codec
from schemas.records import ProposalBatch, RequestEvent
from store.keys import KeyLayout
from store.protocol import ReadBatch
from store.redis_store import RedisStore
from store.values import decode_vector
from streams.kafka_clients import make_producer
from streams.settings import Settings
from tests.integration.fault_harness import fault_pipeline
from tests.integration.live_harness import fresh_live_settings, read_topic

pytestmark = [pytest.mark.integration, pytest.mark.slow]

MINUTE = 60_000
USER, ITEMS = 7, (11, 12)


def _verified(settings: Settings, codec: Codec) -> list[tuple[int, int]]:
    """(item, request event time) of every pair in ``verified``."""
    out = []
    for _, value in read_topic(settings, settings.topic("verified")):
        b = codec.decode(value, ProposalBatch)
        out += [(item, b.event_time_ms) for item in b.item_ids]
    return sorted(out)


def test_a_shed_pair_is_verified_again_after_the_in_flight_timeout(
    bundle: Path, tmp_path: Path
) -> None:
    from streams.lag import LagReader

    settings = fresh_live_settings(bundle, verifier_rank_by="vm")
    assert settings.pair_in_flight_timeout_ms == 30 * MINUTE  # the default is what is tested
    assert settings.refresh_after_ms == 120 * MINUTE
    now = int(time.time() * 1000)
    first = now - settings.pair_ttl_ms - 20 * MINUTE  # shed: older than the pair TTL
    second = first + 45 * MINUTE  # not shed; past the in-flight timeout, inside refresh_after
    assert now - second < settings.pair_ttl_ms
    codec, producer = Codec(), make_producer(settings)
    reader = LagReader(settings)
    topics = [settings.topic(t) for t in ("requests", "speculated", "verified", "embeddings")]
    groups = [f"{settings.topic_prefix}-pipeline", f"{settings.topic_prefix}-fm"]
    try:
        with fault_pipeline(settings, tmp_path, fm_env={"SOLARIS_SHED_CLOCK": "wall"}) as procs:
            for rid, t in (("r-first", first), ("r-second", second)):
                rec = RequestEvent(rid, USER, t, "feed", ITEMS)
                producer.produce(
                    settings.topic("requests"),
                    key=str(USER).encode(),
                    value=codec.encode(rec),
                    timestamp=t,
                )
                assert producer.flush(10) == 0
                assert reader.wait_drained(groups, topics, timeout_s=90), "drain timed out"
                procs.alive()
            fm_log = procs.log("fm")
    finally:
        reader.close()
    verified = _verified(settings, codec)
    at_first = [item for item, t in verified if t == first]
    assert at_first, f"nothing verified at the first request: {verified}"
    assert "shed" in fm_log  # the first request's pairs never reached the store
    store = RedisStore(settings.store_url, KeyLayout(settings.key_prefix))
    try:
        pairs = [(USER, item) for item in at_first]
        values = store.read(ReadBatch(pairs=pairs), timeout_ms=5_000).pairs
    finally:
        store.close()
    for item, raw in zip(at_first, values, strict=True):
        assert (item, second) in verified, f"item {item} not verified again: {verified}"
        assert raw is not None, f"item {item} never stored"
        assert decode_vector(raw).event_time_ms == second

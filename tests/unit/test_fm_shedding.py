"""Shedding in the FM worker (issue 24 item 6): a verified message dated more than the pair TTL
before the shed clock is dropped before the FM, counted and never dead-lettered; a fresh one is
embedded as before. The rule agrees with the reader: shed exactly when the pair could no longer
be served exact."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import pytest
from prometheus_client import REGISTRY

from schemas.records import EmbeddingBatch
from store.memory import InMemoryStore
from store.tiers import Tier
from streams.engine.embedder import Embedder
from streams.engine.models import EngineModels
from streams.engine.steps.embed import embed_input, embedding_batch, past_pair_ttl
from streams.live.components import Components
from streams.settings import Settings
from tests.fakes import FakeFM
from tests.unit.test_agents import Sent
from tests.unit.test_embed_agent import run_embed, verified
from tests.unit.test_reader import HOUR, T0, pair, reader


def test_shed_exactly_when_the_reader_would_no_longer_serve_the_pair() -> None:
    store = InMemoryStore(clock_ms=lambda: T0)
    store.write_pairs([pair(1, 10, T0, 0.5)], HOUR)
    r = reader(store)  # pair TTL one hour
    for now in (T0 + 1, T0 + HOUR - 1, T0 + HOUR, T0 + HOUR + 1, T0 + 5 * HOUR):
        servable = bool(r.lookup(1, [10], now).tiers[0] == Tier.EXACT)
        assert past_pair_ttl(T0, now, HOUR) == (not servable), now
    assert not past_pair_ttl(T0 + HOUR, T0, HOUR)  # dated ahead of the clock: kept


def shed_pairs() -> float:
    return REGISTRY.get_sample_value("solaris_pairs_shed_total") or 0.0


@pytest.mark.parametrize("clock", ["wall", "off"])
def test_a_stale_message_is_shed_and_counted_a_fresh_one_embedded(
    clock: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    settings = Settings(topic_prefix="shed-unit", agent_sends="faust", shed_clock=clock)
    now = int(time.time() * 1000)
    ttl = settings.pair_ttl_ms
    stale, broken, fresh = verified(3)
    stale = dataclasses.replace(stale, event_time_ms=now - ttl - 60_000)
    broken = dataclasses.replace(  # stale too, but invalid: dead-lettered, not shed
        broken, event_time_ms=now - ttl - 50_000, history_times_ms=broken.history_times_ms[::-1]
    )
    fresh = dataclasses.replace(fresh, event_time_ms=now - 1_000)
    codec = Components(settings, EngineModels(FakeFM(4)), InMemoryStore()).codec
    before = shed_pairs()

    def done(agent: Any, sent: Sent) -> bool:
        topics = sent.by_topic
        embedded = topics.get("shed-unit.embeddings", [])
        return len(topics.get("shed-unit.dead-letter", [])) >= 1 and any(
            codec.decode(v, EmbeddingBatch).request_id == fresh.request_id for v in embedded
        )

    values = [codec.encode(m) for m in (stale, broken, fresh)]
    sent, parts, _ = run_embed(settings, values, monkeypatch, until=done)

    kept = [fresh] if clock == "wall" else [stale, fresh]
    want_store, embedder, want = InMemoryStore(), Embedder(FakeFM(4)), []
    for m in kept:
        it = embed_input(None, m)
        mine = embedder.embed(it.pairs, it.histories)
        want_store.write_pairs(mine, ttl)
        want.append(embedding_batch(m, mine))
    got = [parts.codec.decode(v, EmbeddingBatch) for v in sent.by_topic["shed-unit.embeddings"]]
    assert got == want
    assert set(parts.store._data) == set(want_store._data)  # nothing of the shed one stored
    assert len(sent.by_topic["shed-unit.dead-letter"]) == 1  # the broken one only
    shed = len(stale.item_ids) if clock == "wall" else 0
    assert shed_pairs() - before == shed
    logged = [r.getMessage() for r in caplog.records if r.getMessage().startswith("shed ")]
    if clock == "wall":
        t = stale.event_time_ms
        assert logged == [
            f"shed 1 verified messages ({shed} pairs) dated {t}..{t}: more than the pair TTL "
            f"({ttl} ms) before the wall clock {logged[0].rsplit(' ', 1)[1]}"
        ]
    else:
        assert logged == []

"""The ``embed`` agent under Faust's ``test_context``: pipelined FM groups give the same stored
values and ``embeddings`` messages, in input order, as one FM call over the whole batch."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable, Sequence
from typing import Any

import aiokafka.errors
import faust
import faust.tables.base
import numpy as np
import pytest

from schemas.records import EmbeddingBatch, ProposalBatch
from store.memory import InMemoryStore
from store.values import decode_vector
from streams.engine.embedder import Embedder
from streams.engine.history import UserHistory
from streams.engine.models import EngineModels
from streams.engine.steps.embed import embed_input, embedding_batch
from streams.engine.steps.state import user_states
from streams.live.agents.embed import MIN_GROUP_PAIRS, group_pairs
from streams.live.app import create_app
from streams.live.components import Components
from streams.settings import Settings
from tests.fakes import FakeFM
from tests.unit.test_agents import Sent, close_current_loop, close_test_loops
from tests.unit.test_state_tier import FakeState

T0 = 1_700_000_000_000


def verified(n: int) -> list[ProposalBatch]:
    """``n`` requests of 1..12 pairs each, users repeating, histories of a few entries."""
    out = []
    for r in range(n):
        k = 1 + (r * 7) % 12
        items = tuple(100 + r * 13 + j for j in range(k))
        hist = tuple(range(1 + r % 5))
        out.append(
            ProposalBatch(
                f"r{r}",
                r % 9,
                T0 + r,
                k,
                items,
                ("candidates",) * k,
                (),
                hist,
                tuple(i % 2 for i in hist),
                tuple(T0 - 1000 + i for i in hist),
            )
        )
    return out


async def feed(app: faust.App, values: list[bytes], done: Callable[[Any], bool]) -> None:
    """Put ``values`` and poll ``done(agent)`` (the test context's agent) for 10 s at most."""
    async with app.agents["embed"].test_context() as agent:
        for value in values:
            await agent.put(value, key=b"7", partition=0)
        for _ in range(500):  # polled: a loaded machine may take a while
            if done(agent):
                return
            await asyncio.sleep(0.02)


def run_embed(
    settings: Settings,
    values: list[bytes],
    monkeypatch: pytest.MonkeyPatch,
    fm: FakeFM | None = None,
    until: Callable[[Any, Sent], bool] = lambda agent, sent: False,
    store: InMemoryStore | None = None,
    state: Any = None,
) -> Any:
    """Feed ``values`` to the embed agent and wait (10 s at most) ``until`` says it is done;
    returns (sends, components, FM). ``state``: the state tier's split FM (None: off)."""
    sent = Sent()
    monkeypatch.setattr(faust.Topic, "send", lambda self, **kw: sent.send(self, **kw))
    close_current_loop()
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    fm = fm or FakeFM(4)
    models = EngineModels(fm, state=state)
    parts = Components(settings, models, InMemoryStore() if store is None else store)
    app = create_app(settings, ["embed"], parts, store="memory://")
    app.finalize()
    app.flow_control.resume()
    try:
        loop.run_until_complete(feed(app, values, lambda agent: until(agent, sent)))
    finally:
        close_test_loops(loop, app)
    return sent, parts, fm


def test_pipelined_groups_equal_one_call(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = Settings(
        topic_prefix="embed-unit", agent_sends="faust", embed_batch_size=64, embed_batch_pairs=40
    )
    msgs = verified(60)
    bad = dataclasses.replace(msgs[4], history_times_ms=msgs[4].history_times_ms[::-1])
    codec_parts = Components(settings, EngineModels(FakeFM(4)), InMemoryStore())
    enc = codec_parts.codec.encode
    values = [enc(m) for m in msgs[:4]] + [enc(bad)] + [enc(m) for m in msgs[5:]]

    def done(agent: Any, sent: Sent) -> bool:
        topics = sent.by_topic
        return len(topics.get("embed-unit.embeddings", [])) + len(
            topics.get("embed-unit.dead-letter", [])
        ) >= len(values)

    sent, parts, fm = run_embed(settings, values, monkeypatch, until=done)

    good = msgs[:4] + msgs[5:]
    ref_store = InMemoryStore()
    embedder = Embedder(FakeFM(4))
    want = []
    for m in good:  # one message at a time: the values must not depend on the grouping
        it = embed_input(None, m)
        mine = embedder.embed(it.pairs, it.histories)
        ref_store.write_pairs(mine, settings.pair_ttl_ms)
        want.append(embedding_batch(m, mine))
    got = [parts.codec.decode(v, EmbeddingBatch) for v in sent.by_topic["embed-unit.embeddings"]]
    assert got == want  # same bytes, same (input) order
    assert {k: v for k, (_, v) in parts.store._data.items()} == {
        k: v for k, (_, v) in ref_store._data.items()
    }
    assert fm.calls >= 2 * 60 * 6 // (40 * 2)  # pipelined: many groups of at most 40 pairs
    assert len(sent.by_topic["embed-unit.dead-letter"]) == 1


def test_group_size_is_capped_and_splits_a_batch() -> None:
    assert group_pairs(1024, 128, 9.2) == 295  # 128 messages of ~9 pairs: 4 groups
    assert group_pairs(100, 128, 9.2) == 100  # never above the cap
    assert group_pairs(1024, 4, 2.0) == MIN_GROUP_PAIRS  # small batches: one group


def test_embed_messages_equals_embed_over_their_pairs() -> None:
    msgs = verified(30)
    items = [embed_input(None, m) for m in msgs]
    pairs = [p for it in items for p in it.pairs]
    hists = [h for it in items for h in it.histories]
    want = Embedder(FakeFM(4)).embed(pairs, hists)
    got = Embedder(FakeFM(4)).embed_messages(msgs, [it.history for it in items])
    assert got == want
    assert Embedder(FakeFM(4)).embed_messages([], []) == []


class CountingState(FakeState):
    """The state tier's split FM, counting the history rows it encodes."""

    def __init__(self) -> None:
        super().__init__()
        self.rows = 0

    def states(self, event_time_ms: np.ndarray, histories: Sequence[UserHistory]) -> np.ndarray:
        self.rows += len(histories)
        return super().states(event_time_ms, histories)


def test_states_are_stored_from_the_fm_run_one_history_encoding_per_message(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With the split FM the worker stores the states its FM run computed: the stored state keys
    equal the simulator's step over one message at a time, and each message's history is
    encoded once (before: once for the pairs and again for the states)."""
    settings = Settings(
        topic_prefix="embed-state", agent_sends="faust", embed_batch_size=64, embed_batch_pairs=40
    )
    msgs = verified(40)
    enc = Components(settings, EngineModels(FakeFM(4)), InMemoryStore()).codec.encode
    out = "embed-state.embeddings"
    state = CountingState()
    _, parts, _ = run_embed(
        settings,
        [enc(m) for m in msgs],
        monkeypatch,
        until=lambda agent, sent: len(sent.by_topic.get(out, [])) >= len(msgs),
        state=state,
    )
    ref = InMemoryStore()
    version, dtype = parts.models.fm.model_version, parts.stages.embedder.dtype
    for m in msgs:
        one = user_states([embed_input(None, m)], FakeState().states, version, dtype)
        ref.write_states(one.values, settings.state_ttl_ms)
    assert ref._data, "no state written by the reference"
    got = {k: parts.store._data[k][1] for k in ref._data if k in parts.store._data}
    assert got == {k: v for k, (_, v) in ref._data.items()}
    assert state.rows == len(msgs)


class BrokenFM(FakeFM):
    """Fails its second call with an infrastructure error (not the message's fault); later
    calls are slow, so groups not cancelled would still be running when the test looks."""

    def embed(self, *args: Any) -> Any:
        if self.calls == 1:
            self.calls += 1
            raise aiokafka.errors.KafkaConnectionError("broker gone")
        if self.calls > 1:
            time.sleep(0.2)
        return super().embed(*args)


def test_an_infrastructure_error_reruns_the_whole_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 24: the FM call fails with an infrastructure error mid-batch. Before, the error left
    the agent and Faust acked the batch (its unsent messages lost). Now the batch guard cancels
    the batch's FM groups and runs it again: every message is embedded, none dead-lettered."""
    settings = Settings(
        topic_prefix="embed-unit",
        agent_sends="faust",
        embed_batch_size=64,
        embed_batch_pairs=40,
        agent_batch_max_backoff_s=0.05,
    )
    codec = Components(settings, EngineModels(FakeFM(4)), InMemoryStore()).codec
    msgs = verified(60)
    values = [codec.encode(m) for m in msgs]

    def embedded(sent: Sent) -> set[tuple[int, int]]:
        got = [
            codec.decode(v, EmbeddingBatch) for v in sent.by_topic.get("embed-unit.embeddings", [])
        ]
        return {(b.user_id, b.event_time_ms) for b in got}

    def done(agent: Any, sent: Sent) -> bool:
        return len(embedded(sent)) >= len(msgs)

    fm = BrokenFM(4)
    sent, _, _ = run_embed(settings, values, monkeypatch, fm=fm, until=done)
    assert embedded(sent) == {(m.user_id, m.event_time_ms) for m in msgs}
    assert fm.calls > 2  # it failed once, then the batch ran again
    assert "embed-unit.dead-letter" not in sent.by_topic  # not the messages' fault


class SlowFirstWriteStore(InMemoryStore):
    """The first pair write takes a while (a slow Redis, or a write that is retried)."""

    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def write_pairs(self, records: Any, ttl_ms: int) -> None:
        self.writes += 1
        if self.writes == 1:
            time.sleep(0.3)
        super().write_pairs(records, ttl_ms)


def test_a_later_request_leaves_its_newer_pair_in_the_store(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One user's two requests with the same pair fall into two FM groups of one batch: the
    store must end with the second (newer) value even when the first group's write is slow."""
    settings = Settings(
        topic_prefix="embed-unit", agent_sends="faust", embed_batch_size=64, embed_batch_pairs=4
    )
    first = verified(3)[2]  # 3 pairs: with 4 pairs at most per group, one group per request
    second = dataclasses.replace(first, request_id="later", event_time_ms=first.event_time_ms + 5)
    codec = Components(settings, EngineModels(FakeFM(4)), InMemoryStore()).codec
    store = SlowFirstWriteStore()
    run_embed(
        settings,
        [codec.encode(m) for m in (first, second)],
        monkeypatch,
        until=lambda agent, sent: len(sent.by_topic.get("embed-unit.embeddings", [])) == 2,
        store=store,
    )
    assert store.writes == 2  # two groups (4 pairs at most each), two writes
    times = {decode_vector(v).event_time_ms for _, v in store._data.values()}
    assert len(store._data) == len(first.item_ids)
    assert times == {second.event_time_ms}, f"older values left in the store: {times}"

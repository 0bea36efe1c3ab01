"""What a live run and the simulator produced, as values, so the tests can compare them.

The simulator side runs the real engine with two recording decorators: the store keeps the last
bytes written per key (what Redis ends up holding), and the FM records the history each pair
was embedded with. The live side reads the same things back from Kafka and Redis.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from schemas.codec import Codec
from schemas.limits import Limits
from schemas.records import ImpressionEvent, ProposalBatch, RequestEvent
from store.keys import KeyLayout
from store.memory import InMemoryStore
from store.state_slots import split_states
from store.values import decode_vector
from streams.engine.embedder import EmbeddingModel
from streams.engine.history import UserHistory
from streams.engine.models import EngineModels
from streams.settings import Settings
from streams.simulate.simulator import Simulator
from tests.integration.live_harness import read_topic

#: (user, item, request event time) -> (history items, labels, times)
PairKey = tuple[int, int, int]
History = tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]


def history_tuple(h: UserHistory) -> History:
    return (
        tuple(int(x) for x in h.items),
        tuple(int(x) for x in h.labels),
        tuple(int(x) for x in h.times_ms),
    )


class RecordingStore(InMemoryStore):
    """The simulator's in-memory store that also keeps the last value written per key."""

    def __init__(self, layout: KeyLayout, clock_ms: Callable[[], int]) -> None:
        super().__init__(layout, clock_ms)
        self.written: dict[bytes, bytes] = {}

    def _put_many(self, items: Sequence[tuple[bytes, bytes]], ttl_ms: int) -> None:
        super()._put_many(items, ttl_ms)
        self.written.update(items)


@dataclass
class RecordingFM:
    """Delegates to the real FM and records the history each pair was embedded with."""

    inner: EmbeddingModel
    histories: dict[PairKey, History] = field(default_factory=dict)

    @property
    def model_version(self) -> str:
        return self.inner.model_version

    @property
    def dim(self) -> int:
        return self.inner.dim

    def embed(
        self,
        user_ids: np.ndarray,
        item_ids: np.ndarray,
        event_time_ms: np.ndarray,
        histories: Sequence[UserHistory],
    ) -> tuple[np.ndarray, np.ndarray]:
        for u, i, t, h in zip(user_ids, item_ids, event_time_ms, histories, strict=True):
            self.histories[(int(u), int(i), int(t))] = history_tuple(h)
        return self.inner.embed(user_ids, item_ids, event_time_ms, histories)


@dataclass(frozen=True)
class Values:
    """Histories of embedded pairs and the stored pair / aggregate / history values, by key."""

    histories: dict[PairKey, History]
    pairs: dict[bytes, bytes]
    aggregates: dict[bytes, bytes]
    #: each user's stored history (the fair VM's streaming features), by store key
    user_histories: dict[bytes, bytes]
    #: each user's stored FM state (the state tier), by store key
    states: dict[bytes, bytes]


def simulated_values(
    events: Iterable[RequestEvent | ImpressionEvent],
    config: object,
    models: EngineModels,
    key_prefix: str,
) -> Values:
    """Run the simulator over ``events`` and return what it embedded and stored."""
    fm = RecordingFM(models.fm)
    sims: list[Simulator] = []
    store = RecordingStore(KeyLayout(key_prefix), clock_ms=lambda: sims[0].now_ms)
    sim = Simulator(config, dataclasses.replace(models, fm=fm), store)  # type: ignore[arg-type]
    sims.append(sim)
    if models.state is not None:  # the split FM embeds messages: record them where they enter
        _record_messages(sim, fm.histories)
    sim.run(events)
    return Values(
        fm.histories,
        {k: v for k, v in store.written.items() if b":p:" in k},
        {k: v for k, v in store.written.items() if k.endswith(b":agg")},
        {k: v for k, v in store.written.items() if k.endswith(b":h")},
        {k: v for k, v in store.written.items() if k.endswith(b":st")},
    )


def _record_messages(sim: Simulator, out: dict[PairKey, History]) -> None:
    """Record the history each verified message's pairs are embedded with (the split FM sees
    messages, not pairs: RecordingFM is not called)."""
    embedder = sim.stages.embedder
    prepare = embedder.prepare_messages

    def recording(batches: Sequence[ProposalBatch], histories: Sequence[UserHistory]) -> object:
        for b, h in zip(batches, histories, strict=True):
            for item in b.item_ids:
                out[(b.user_id, item, b.event_time_ms)] = history_tuple(h)
        return prepare(batches, histories)

    embedder.prepare_messages = recording  # type: ignore[method-assign]


def simulated_for(
    settings: Settings, bundle: Path, events: Iterable[RequestEvent | ImpressionEvent]
) -> Values:
    """:func:`simulated_values` with the bundle's models and the simulator configured from the
    live run's ``settings``: what a clean lockstep run of them produces."""
    from streams.models_loader import load_models
    from streams.simulate.config import sim_config_from_settings

    models, _ = load_models(settings, bundle)
    config = sim_config_from_settings(settings, models.fm.dim)
    return simulated_values(events, config, models, settings.key_prefix)


def live_values(settings: Settings) -> Values:
    """The histories attached to the live ``verified`` topic and the values in Redis."""
    import redis

    codec = Codec(Limits(max_candidates=settings.max_candidates))
    histories: dict[PairKey, History] = {}
    for _, value in read_topic(settings, settings.topic("verified")):
        b = codec.decode(value, ProposalBatch)
        h = (b.history_items, b.history_labels, b.history_times_ms)
        hist = (tuple(h[0]), tuple(h[1]), tuple(h[2]))
        for item in b.item_ids:
            histories[(b.user_id, item, b.event_time_ms)] = hist
    client = redis.Redis.from_url(settings.store_url)
    try:
        keys = sorted(client.scan_iter(match=f"{settings.key_prefix}:*", count=1000))
        values = dict(zip(keys, client.mget(keys), strict=True)) if keys else {}
    finally:
        client.close()
    return Values(
        histories,
        {k: v for k, v in values.items() if b":p:" in k and v is not None},
        {k: v for k, v in values.items() if k.endswith(b":agg") and v is not None},
        {k: v for k, v in values.items() if k.endswith(b":h") and v is not None},
        {k: v for k, v in values.items() if k.endswith(b":st") and v is not None},
    )


@dataclass(frozen=True)
class VectorDiff:
    """How two key -> value maps differ: keys only on one side, and values that differ."""

    only_left: list[bytes]
    only_right: list[bytes]
    equal_bytes: int
    header_mismatch: list[bytes]
    max_abs_delta: float


def compare_vectors(left: dict[bytes, bytes], right: dict[bytes, bytes]) -> VectorDiff:
    """Compare stored vector values key by key: headers (event time, version, count) must match;
    vectors are compared as floats (max |delta| over all keys whose bytes differ)."""
    common = sorted(left.keys() & right.keys())
    equal = 0
    bad_head: list[bytes] = []
    delta = 0.0
    for key in common:
        if left[key] == right[key]:
            equal += 1
            continue
        # a state key holds up to two values (store.state_slots); pairs and aggregates one
        lefts, rights = split_states(left[key]), split_states(right[key])
        heads = [
            [(v.event_time_ms, v.version_tag, v.count, v.dim) for v in vs]
            for vs in ([decode_vector(x) for x in lefts], [decode_vector(x) for x in rights])
        ]
        if heads[0] != heads[1]:
            print(f"{key!r}: headers {heads[0]} vs {heads[1]}")
            bad_head.append(key)
            continue
        for a, b in zip(lefts, rights, strict=True):
            va, vb = decode_vector(a).array(), decode_vector(b).array()
            delta = max(delta, float(np.max(np.abs(va - vb))))
    return VectorDiff(
        sorted(left.keys() - right.keys()),
        sorted(right.keys() - left.keys()),
        equal,
        bad_head,
        delta,
    )


def assert_live_values_equal(live: Values, offline: Values) -> None:
    """The ranker reads what the simulator computes: same histories, vectors, aggregates, FM
    states and stored histories (the parity tests' value comparison)."""
    # 1. The FM saw the same history for every pair (live: the verified topic).
    assert live.histories.keys() == offline.histories.keys()
    wrong = [k for k in offline.histories if live.histories[k] != offline.histories[k]]
    assert not wrong, (
        f"{len(wrong)} of {len(offline.histories)} pairs embedded with another history, e.g. "
        f"{wrong[0]}: live {live.histories[wrong[0]]} vs simulator {offline.histories[wrong[0]]}"
    )
    assert sum(1 for h in offline.histories.values() if h[0]) > len(offline.histories) // 2

    # 2. Every exact pair vector, 3. every user aggregate and every user FM state (the state
    # tier) in Redis equals the simulator's.
    assert_vectors_equal(live, offline)

    # 4. Every user's stored history (the fair vm_solaris's streaming features) is the
    # simulator's, byte for byte.
    assert live.user_histories.keys() == offline.user_histories.keys()
    differ = [
        k for k in offline.user_histories if live.user_histories[k] != offline.user_histories[k]
    ]
    assert not differ, f"{len(differ)} stored histories differ, e.g. {differ[0]!r}"
    assert len(offline.user_histories) >= 5


def assert_vectors_equal(live: Values, offline: Values) -> None:
    """Every exact pair vector, user aggregate and user FM state in Redis equals the
    simulator's. Lockstep feeds the FM one request's pairs per batch, as the simulator does,
    so the bytes are expected to be identical; a different ONNX batch composition could move
    float16 roundings by one ulp, which the tolerance allows and the message reports."""
    for name, got, want in (
        ("pairs", live.pairs, offline.pairs),
        ("aggregates", live.aggregates, offline.aggregates),
        ("states", live.states, offline.states),
    ):
        diff = compare_vectors(got, want)
        assert not diff.only_left and not diff.only_right, (
            f"{name}: {len(diff.only_left)} only live, {len(diff.only_right)} only simulated"
        )
        assert not diff.header_mismatch, f"{name}: headers differ for {diff.header_mismatch[:3]}"
        assert diff.max_abs_delta <= 2e-3, f"{name}: max |delta| {diff.max_abs_delta}"
        print(
            f"{name}: {len(want)} keys, {diff.equal_bytes} byte-identical, max |d| {diff.max_abs_delta}"
        )
        assert len(want) >= 5

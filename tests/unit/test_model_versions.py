"""Model versions end to end (issue 10 item 3): the bundle's version gates every read, an
aggregate never mixes versions, KNN snapshots carry version + dim and foreign ones are skipped."""

from __future__ import annotations

import asyncio
import struct
import time
from dataclasses import replace

import numpy as np
import pytest

from models.data.columns import iter_events
from models.data.synthetic import SyntheticConfig, generate
from schemas.records import (
    ImpressionEvent,
    NeighbourList,
    PairEmbedding,
    RequestEvent,
    UserAggregate,
)
from store.errors import CorruptValue
from store.memory import InMemoryStore
from store.reader import FeatureReader
from store.tiers import Tier
from store.values import version_tag
from streams.engine.aggregator import AggregateState, RollingAggregator
from streams.engine.config import ENGINE_DEFAULTS, EngineConfig, reader_config
from streams.engine.models import EngineModels
from streams.engine.neighbours import NeighbourIndex, UserRepresentations
from streams.live.knn_snapshot import (
    decode_snapshot,
    encode_snapshot,
    merged_index,
    publish_snapshot,
)
from streams.settings import Settings
from streams.simulate.config import SimConfig, sim_config_from_settings
from streams.simulate.run import simulate
from tests.fakes import FakeFM, FakeItems, FakeSolaris, FakeVM

#: the neighbour horizon the drivers pass (Settings.neighbour_aggregate_ttl_ms default)
HORIZON = 7 * 24 * 3_600_000

T0 = 1_700_000_000_000
H = 3_600_000
DIM = 4
A, B = "fm-a", "fm-b"


def vec(x: float, dim: int = DIM) -> np.ndarray:
    return np.full(dim, x, np.float32)


def pair(u: int, i: int, t: int, x: float, version: str) -> PairEmbedding:
    return PairEmbedding.from_array(u, i, t, version, vec(x))


def agg(u: int, t: int, x: float, version: str) -> UserAggregate:
    return UserAggregate.from_array(u, t, 24 * H, 3, version, vec(x))


# --- the reader the ranker, simulator and bench build --------------------------------------


def test_reader_config_sets_the_bundle_version_tag() -> None:
    cfg = reader_config(Settings(), DIM, B)
    assert cfg.version_tag == version_tag(B)
    assert reader_config(Settings(), DIM, None).version_tag is None
    assert sim_config_from_settings(Settings(), DIM, model_version=B).reader == cfg


def test_gated_reader_serves_no_other_version_in_any_tier() -> None:
    store = InMemoryStore(clock_ms=lambda: T0)
    # user 1: exact pair and aggregate of version A; user 5: neighbours 2 and 3 with A values
    store.write_pairs([pair(1, 10, T0, 1.0, A), pair(2, 10, T0, 2.0, A)], H)
    store.write_aggregates([agg(1, T0, 3.0, A), agg(3, T0, 4.0, A)], H)
    store.write_neighbours([NeighbourList(5, T0, (2, 3), (0.9, 0.5))], H)
    reader = FeatureReader(store, reader_config(Settings(), DIM, B))
    assert reader.lookup(1, [10, 11], T0 + 1).tiers.tolist() == [Tier.MISSING] * 2
    assert reader.lookup(5, [10, 11], T0 + 1).tiers.tolist() == [Tier.MISSING] * 2
    # the same keys rewritten by version B are served, tier by tier
    store.write_pairs([pair(1, 10, T0, 1.5, B), pair(2, 10, T0, 2.5, B)], H)
    store.write_aggregates([agg(1, T0, 3.5, B), agg(3, T0, 4.5, B)], H)
    vectors, tiers, _ = reader.lookup(1, [10, 11], T0 + 1)
    assert tiers.tolist() == [Tier.EXACT, Tier.AGGREGATE]
    np.testing.assert_allclose(vectors, [vec(1.5), vec(3.5)])
    vectors, tiers, _ = reader.lookup(5, [10, 11], T0 + 1)
    assert tiers.tolist() == [Tier.NEIGHBOUR_ITEM, Tier.NEIGHBOUR_AGGREGATE]
    np.testing.assert_allclose(vectors, [vec(2.5), vec(4.5)])  # only user 2 has item 10


@pytest.fixture(scope="module")
def events() -> list[RequestEvent | ImpressionEvent]:
    traffic = generate(
        SyntheticConfig(n_users=30, n_items=300, days=2.0, k=20, seed=3, sessions_per_day=0.35)
    )
    return list(iter_events(traffic.requests, traffic.impressions))


def _poisoned_store(events: list[RequestEvent | ImpressionEvent]) -> InMemoryStore:
    """Another FM's fresh pair of every (user, candidate) just before each request."""
    store = InMemoryStore(clock_ms=lambda: 0)
    for ev in events:
        if isinstance(ev, RequestEvent):
            store.write_pairs(
                [pair(ev.user_id, i, ev.event_time_ms - 1, 9.0, "old-fm") for i in ev.candidates],
                H,
            )
    return store


def test_simulator_reads_only_its_fm_version(events: list[RequestEvent | ImpressionEvent]) -> None:
    models = EngineModels(FakeFM(DIM), FakeVM(), FakeSolaris(), FakeItems(DIM))
    cfg = SimConfig(EngineConfig.defaults(DIM))

    def run(store: InMemoryStore) -> dict[str, float]:
        report = simulate(lambda: events, cfg, models, with_random=False, store=store)
        return report["cumulative"]

    clean = run(InMemoryStore(clock_ms=lambda: 0))
    assert run(_poisoned_store(events)) == clean
    assert 0 < clean["exact"] < 1
    # the reference runs embed with another (null) model and still see their own values
    gated = cfg.with_changes(reader=reader_config(Settings(), DIM, FakeFM.model_version))
    report = simulate(lambda: events, gated, models, with_random=True)
    assert report["oracle"]["exact"] > 0
    assert report["random_same_budget"]["cumulative"]["exact"] > 0
    wrong = cfg.with_changes(reader=reader_config(Settings(), DIM, "another-bundle"))
    with pytest.raises(ValueError, match="version tag"):
        simulate(lambda: events, wrong, models, with_random=False)


# --- the aggregator ------------------------------------------------------------------------


def test_new_version_restarts_the_users_aggregate() -> None:
    agg_ = RollingAggregator(window_ms=24 * H, bucket_ms=H)
    state = AggregateState()
    first = agg_.add(state, [pair(1, 10, T0, 1.0, A), pair(1, 11, T0 + 10, 3.0, A)])
    assert first is not None and first.count == 2 and first.model_version == A
    switched = agg_.add(state, [pair(1, 10, T0 + 20, 8.0, B)])
    assert switched is not None and switched.count == 1 and switched.model_version == B
    np.testing.assert_allclose(switched.array(), 8.0)
    assert state.version == B and state.seen == {(10, T0 + 20)}
    more = agg_.add(state, [pair(1, 12, T0 + 30, 6.0, B)])
    assert more is not None and more.count == 2
    np.testing.assert_allclose(more.array(), 7.0)


def test_both_drivers_refuse_an_own_version_embedding_of_another_dim() -> None:
    """The rule the live aggregate agent alone applied lives in the engine's aggregator, so the
    simulator (same stages) applies it too: an embedding of the driver's own FM version whose
    dim is not that FM's cannot come from it; another version's is accepted (an upgrade)."""
    from streams.engine.stages import build_stages

    cfg = EngineConfig.defaults(DIM)
    models = EngineModels(FakeFM(DIM), FakeVM(), FakeSolaris(), FakeItems(DIM))
    stages = build_stages(cfg.speculator, cfg.verifier, models, 24 * H, H)
    own = FakeFM.model_version
    wide = PairEmbedding.from_array(1, 10, T0, own, np.ones(2 * DIM, np.float32))
    state = AggregateState()
    from streams.engine.errors import StepError

    with pytest.raises(StepError, match="whose FM outputs"):
        stages.aggregator.add(state, [pair(1, 11, T0, 1.0, own), wide])
    assert not state.buckets and not state.seen  # refused before anything was folded in
    other = PairEmbedding.from_array(1, 10, T0, "fm-next", np.ones(2 * DIM, np.float32))
    assert stages.aggregator.add(state, [other]) is not None


def test_late_old_version_embedding_is_dropped_not_mixed() -> None:
    agg_ = RollingAggregator(window_ms=24 * H, bucket_ms=H)
    state = AggregateState()
    agg_.add(state, [pair(1, 10, T0 + 100, 1.0, A)])
    agg_.add(state, [pair(1, 11, T0 + 50, 4.0, B)])  # B re-embeds from an earlier offset
    # a redelivered A embedding from before the switch: not aggregated, counted
    assert agg_.add(state, [pair(1, 12, T0 + 90, 100.0, A)]) is None
    assert agg_.stale_dropped == 1 and state.version == B
    out = agg_.add(state, [pair(1, 13, T0 + 200, 2.0, B), pair(1, 14, T0 + 60, 100.0, A)])
    assert out is not None and out.count == 2 and out.model_version == B
    np.testing.assert_allclose(out.array(), 3.0)
    assert agg_.stale_dropped == 2
    # a rollback to A (newer traffic than A ever folded here) restarts the state again
    back = agg_.add(state, [pair(1, 15, T0 + 300, 5.0, A)])
    assert back is not None and back.count == 1 and back.model_version == A
    np.testing.assert_allclose(back.array(), 5.0)


def test_version_survives_json_and_old_json_is_readable() -> None:
    agg_ = RollingAggregator(window_ms=24 * H, bucket_ms=H)
    state = AggregateState()
    agg_.add(state, [pair(1, 10, T0, 1.0, A)])
    agg_.add(state, [pair(1, 11, T0 + 5, 2.0, B)])
    restored = AggregateState.from_json(state.to_json())
    assert restored.version == B and restored.retired == {A: T0}
    assert agg_.add(restored, [pair(1, 12, T0, 9.0, A)]) is None  # still late after restore
    legacy = state.to_json()
    del legacy["v"], legacy["r"]  # state written before versions were stored
    old = AggregateState.from_json(legacy)
    assert old.version is None and old.buckets
    out = agg_.add(old, [pair(1, 13, T0 + 6, 4.0, B)])
    assert out is not None and out.count == 1  # unknown versions in the buckets: restarted
    np.testing.assert_allclose(out.array(), 4.0)


# --- KNN snapshots -------------------------------------------------------------------------


def _index(users: list[int], dim: int) -> NeighbourIndex:
    reps = UserRepresentations(FakeItems(dim))
    rng = np.random.default_rng(len(users) + dim)
    return NeighbourIndex(
        users, rng.normal(size=(len(users), dim)), reps, replace(ENGINE_DEFAULTS.neighbours, k=2)
    )


def test_snapshot_carries_version_and_dim() -> None:
    raw = encode_snapshot(_index([1, 2, 3], DIM), T0, version_tag(B))
    snap = decode_snapshot(raw)
    assert raw[:4] == b"KNN2"
    assert (snap.version_tag, snap.dim, snap.event_time_ms) == (version_tag(B), DIM, T0)
    assert snap.user_ids.tolist() == [1, 2, 3] and snap.vectors.shape == (3, DIM)
    knn1 = struct.pack("<4sIqI", b"KNN1", 0, T0, DIM)  # a version-less snapshot
    wrong_magic = [m + raw[4:] for m in (b"KNN1", b"XXXX")]  # right length, not a KNN2 value
    for bad in (b"", b"garbage-garbage-garbage-garbage", raw[:-1], raw + b"\0", knn1, *wrong_magic):
        with pytest.raises(CorruptValue):
            decode_snapshot(bad)


def test_merged_index_skips_foreign_snapshots() -> None:
    mine = decode_snapshot(encode_snapshot(_index([1, 2], DIM), T0, version_tag(B)))
    other_version = decode_snapshot(encode_snapshot(_index([3], DIM), T0 + 5, version_tag(A)))
    other_dim = decode_snapshot(encode_snapshot(_index([4], DIM * 2), T0 + 5, version_tag(B)))
    reps = UserRepresentations(FakeItems(DIM))
    snaps = [mine, other_version, other_dim]
    index, newest = merged_index(
        snaps, reps, replace(ENGINE_DEFAULTS.neighbours, k=2), version_tag=version_tag(B)
    )
    assert index.user_ids.tolist() == [1, 2] and newest == T0


def test_ranker_ignores_foreign_snapshots() -> None:
    from streams.live.ranker_service import RankerOptions, RankerService

    store = InMemoryStore(clock_ms=lambda: T0)
    tag = version_tag(B)
    publish_snapshot(store, "mine", _index([1, 2], DIM), T0, H, tag)
    publish_snapshot(store, "old-bundle", _index([3], DIM), T0, H, version_tag(A))
    publish_snapshot(store, "wide-bundle", _index([4], DIM * 2), T0, H, tag)
    store.write_snapshot("junk", b"KNN1 or worse", H)
    reader = FeatureReader(store, replace(ENGINE_DEFAULTS.reader, dim=DIM, version_tag=tag))
    options = RankerOptions("g", write_scores=False, snapshot_every_s=0.0)
    service = RankerService(Settings(), reader, None, FakeItems(DIM), options)
    assert service.snapshots is not None and service.snapshots.poll()
    cold = reader.cold_start
    assert isinstance(cold, NeighbourIndex) and cold.user_ids.tolist() == [1, 2]
    assert service.ignored_snapshots == 3


def test_snapshot_publisher_tags_its_bundle_version() -> None:
    from streams.live.components import Components
    from streams.live.neighbours_job import NeighbourRefresher

    store = InMemoryStore(clock_ms=lambda: T0)
    parts = Components(Settings(), EngineModels(FakeFM(DIM), items=FakeItems(DIM)), store)
    assert parts.reps is not None
    for u in (1, 2, 3):
        parts.reps.set(u, vec(float(u)), T0)
        parts.aggregate_times[u] = T0
    refresher = NeighbourRefresher(Settings(), parts, "w")
    asyncio.run(refresher.maybe_refresh(T0 + 1, {}, {}))
    (raw,) = store.read_snapshots().values()
    snap = decode_snapshot(raw)
    assert snap.version_tag == version_tag(FakeFM.model_version) and snap.dim == DIM


def test_ranker_publishes_its_counters_at_least_once_a_second() -> None:
    """Between two ``stats_every`` batches the counters go out once the last publish is a
    second old (they were up to 200 requests stale under slow traffic)."""
    from schemas.codec import Codec
    from schemas.records import RequestEvent
    from streams.live.ranker_service import RankerOptions, RankerService

    store = InMemoryStore(clock_ms=lambda: T0)
    reader = FeatureReader(
        store, replace(ENGINE_DEFAULTS.reader, dim=DIM, version_tag=version_tag(B))
    )
    options = RankerOptions("g", write_scores=False, snapshot_every_s=0.0, stats_every=200)
    service = RankerService(Settings(), reader, None, FakeItems(DIM), options)
    published: list[int] = []
    service._publish = lambda: published.append(service.requests)  # type: ignore[method-assign]
    codec = Codec()

    def request(n: int) -> bytes:
        return codec.encode(RequestEvent(f"r{n}", 7, T0 + n, "home", (1, 2, 3)))

    service._published_at = time.monotonic()
    service._handle(request(1), None)
    assert published == []  # published just now: not again
    service._published_at = time.monotonic() - 1.5
    service._handle(request(2), None)
    assert published == [2]


# --- saved user representations (the reps table) --------------------------------------------


def test_a_representation_saved_by_another_model_of_the_same_dim_is_not_restored() -> None:
    """After an upgrade that keeps the dimension, a representation built from the old model's
    item vectors lives in another space: it is refused, counted, and the user starts afresh
    from this model's item vectors (before: restored and mixed in silently)."""
    from schemas.records import RequestEvent
    from streams.engine.steps.speculate import SavedRep, observe_representation

    items = FakeItems(DIM)
    old = UserRepresentations(items, version_tag=version_tag(A))
    r1 = RequestEvent("r1", 1, T0, "feed", (1, 2, 3))
    saved = observe_representation(old, r1, None, HORIZON)
    assert saved is not None and saved.version_tag == version_tag(A)
    assert SavedRep.from_json(saved.to_json()) == saved

    r2 = RequestEvent("r2", 1, T0 + 1, "feed", (4,))
    upgraded = UserRepresentations(items, version_tag=version_tag(B))
    again = observe_representation(upgraded, r2, saved, HORIZON)
    assert upgraded.foreign == 1
    assert again is not None and again.version_tag == version_tag(B)
    np.testing.assert_allclose(upgraded.vector(1), upgraded.of_items([4]))  # afresh, r2 only
    # the same model restores it and folds r2 into it
    same = UserRepresentations(items, version_tag=version_tag(A))
    observe_representation(same, r2, saved, HORIZON)
    assert same.foreign == 0
    assert not np.allclose(same.vector(1), same.of_items([4]))
    # a value saved before values carried a tag ([vector, seen]) is refused too
    legacy = SavedRep.from_json([saved.vector, saved.seen_at_ms])
    assert legacy is not None and legacy.version_tag is None
    fresh = UserRepresentations(items, version_tag=version_tag(A))
    observe_representation(fresh, r2, legacy, HORIZON)
    assert fresh.foreign == 1

"""An FM upgrade mid-replay on the real broker and Redis (issue 10 item 3).

The pipeline starts on bundle A and replays the first half of the traffic (split inside a user's
session, so fresh A pairs exist when the second half starts). Then only the FM worker and the
ranker are restarted (stopped gracefully, as a rolling upgrade does) on bundle B (another model version, and item vectors of another dim, so the
pipeline worker's KNN snapshots are foreign to the B ranker); the pipeline worker stays on A.
After the rest is replayed:

- every pair and aggregate value written after the switch is B's;
- no served lookup of the B ranker used an A value: every exact hit had a fresh B embedding of
  the pair, every aggregate hit a fresh B embedding of the user (while fresh A pairs that an
  ungated reader would have served existed);
- every user aggregate equals the mean of the user's B embeddings alone (none mixes versions);
- the B ranker stayed up and counted the A snapshots it ignored.
"""

from __future__ import annotations

import dataclasses
import json
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import redis

from schemas.codec import Codec
from schemas.records import EmbeddingBatch, PairEmbedding, RequestEvent
from store.tiers import Tier
from store.values import decode_vector, version_tag
from streams.settings import Settings
from tests.integration.live_harness import TINY_TRAIN, Procs, live_settings, pipeline, read_topic

pytestmark = [pytest.mark.integration, pytest.mark.slow]
TOPICS = ("requests", "impressions", "speculated", "verified", "embeddings")
#: bundle B: another model version, and FM item vectors (the KNN space) of another dim
TRAIN_B = dataclasses.replace(TINY_TRAIN, fm_item_dim=8)


@pytest.fixture(scope="module")
def bundle_b(traffic: Path) -> Path:
    from models.bundle import ensure_bundle

    return ensure_bundle(traffic, TRAIN_B, Settings().cache_dir / "test-models")


def version_of(bundle: Path) -> str:
    from models.bundle import BundleMeta

    return BundleMeta.read(bundle / "meta.json").model_version


def split_traffic(traffic: Path, out: Path) -> tuple[Path, Path, set[str]]:
    """Two traffic files split at the first request past the middle whose user had a request
    in the 30 minutes before (mid-session); also the request ids of the second half."""
    from models.data.traffic import read_traffic, write_traffic

    events = list(read_traffic(traffic))
    requests = [(k, e) for k, e in enumerate(events) if isinstance(e, RequestEvent)]
    last: dict[int, int] = {}
    cut = None
    for n, (k, r) in enumerate(requests):
        prev = last.get(r.user_id)
        last[r.user_id] = r.event_time_ms
        if n >= len(requests) // 2 and prev is not None and r.event_time_ms - prev < 1_800_000:
            cut = k
            break
    assert cut is not None, "no mid-session request in the second half of the traffic"
    first, second = out / "first.avro", out / "second.avro"
    write_traffic(first, events[:cut], {"dataset": "synthetic-test"})
    write_traffic(second, events[cut:], {"dataset": "synthetic-test"})
    ids = {e.request_id for e in events[cut:] if isinstance(e, RequestEvent)}
    return first, second, ids


def store_values(settings: Settings) -> dict[bytes, bytes]:
    """Every pair and aggregate value under the key prefix."""
    client = redis.Redis.from_url(settings.store_url)
    try:
        keys = [
            k
            for k in client.scan_iter(match=f"{settings.key_prefix}:*", count=1000)
            if k.endswith(b":agg") or b":p:" in k
        ]
        values = client.mget(keys) if keys else []
    finally:
        client.close()
    return {k: v for k, v in zip(keys, values, strict=True) if isinstance(v, bytes)}


def drain(settings: Settings, *procs: Procs, timeout_s: float = 150) -> None:
    """Wait until every group of the run has consumed everything, failing fast if one dies."""
    from streams.lag import LagReader

    reader = LagReader(settings)
    try:
        drain_with(reader, settings, *procs, timeout_s=timeout_s)
    finally:
        reader.close()


def drain_with(reader: Any, settings: Settings, *procs: Procs, timeout_s: float = 150) -> None:
    """:func:`drain` on an open ``LagReader`` (a lockstep replay drains before every request:
    a new reader each time cost more than the drain)."""
    topics = [settings.topic(t) for t in TOPICS]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for p in procs:
            p.alive()
        if reader.wait_drained(reader.groups(), topics, timeout_s=5):
            return
    raise AssertionError("pipeline did not drain")


@pytest.fixture(scope="module")
def switch_run(
    traffic: Path, bundle: Path, bundle_b: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    """Run the upgrade once; the tests below assert on what it produced."""
    from streams.lag import LagReader, wait_for_groups
    from streams.live.stats import read_stats
    from streams.replay import replay_file
    from tests.conftest import require_kafka_and_redis

    base = Settings()
    require_kafka_and_redis(base)
    assert version_of(bundle) != version_of(bundle_b)
    settings_a = live_settings(base, uuid.uuid4().hex[:10], bundle, partitions=2)
    settings_b = settings_a.model_copy(update={"bundle_dir": bundle_b})
    tmp = tmp_path_factory.mktemp("versions")
    (tmp / "b").mkdir()
    first, second, second_ids = split_traffic(traffic, tmp)
    t0 = time.monotonic()
    timings: dict[str, float] = {}
    procs_b = Procs(settings_b, tmp / "b")
    try:
        with pipeline(settings_a, tmp) as procs:
            timings["started"] = time.monotonic() - t0
            replay_file(settings_a, first, 0.0)
            drain(settings_a, procs)
            time.sleep(1.0)  # the ranker auto-commits its offsets every 200 ms
            before = store_values(settings_a)
            # a rolling upgrade: the A workers stop gracefully and leave their groups (killed,
            # they stayed members until Faust's 60 s session timeout and the B workers waited)
            procs.stop("fm")
            procs.stop("ranker")
            procs_b.start("fm", "worker", "--agents", "embed")
            procs_b.start("ranker", "ranker")
            groups = [f"{settings_a.topic_prefix}-{g}" for g in ("pipeline", "fm", "ranker")]
            try:
                wait_for_groups(settings_a, groups, timeout_s=120)
            except TimeoutError:
                procs_b.alive()
                raise
            timings["switched"] = time.monotonic() - t0
            # lockstep: the B ranker reads each request after the B values of earlier ones exist
            reader = LagReader(settings_a)
            try:
                replay_file(
                    settings_b, second, 0.0, lambda: drain_with(reader, settings_a, procs, procs_b)
                )
            finally:
                reader.close()
            drain(settings_a, procs, procs_b)
            time.sleep(2.5)  # one more snapshot reload of the ranker (every 2 s)
            procs.alive()
            procs_b.alive()
            after = store_values(settings_a)
            procs_b.stop_all()  # the ranker publishes its counters on exit
            timings["done"] = time.monotonic() - t0
    finally:
        procs_b.stop_all()
    codec = Codec()
    embeddings = [
        codec.decode(v, EmbeddingBatch)
        for _, v in read_topic(settings_a, settings_a.topic("embeddings"))
    ]
    scores = [json.loads(v) for _, v in read_topic(settings_a, settings_a.topic("scores"))]
    yield {
        "settings": settings_a,
        "a": version_of(bundle),
        "b": version_of(bundle_b),
        "before": before,
        "after": after,
        "embeddings": embeddings,
        "scores": [s for s in scores if s["request_id"] in second_ids],
        "second_ids": second_ids,
        "stats": read_stats(settings_a)["ranker"],
        "timings": timings,
        "log_dir": tmp,
    }


def test_values_written_after_the_switch_are_the_new_version(switch_run: dict[str, Any]) -> None:
    before, after = switch_run["before"], switch_run["after"]
    changed = {k: v for k, v in after.items() if before.get(k) != v}
    assert any(k.endswith(b":agg") for k in changed) and any(b":p:" in k for k in changed)
    tags = {k: decode_vector(v).version_tag for k, v in changed.items()}
    assert set(tags.values()) == {version_tag(switch_run["b"])}, switch_run["timings"]


def _fresh(times: list[int], t: int, ttl: int) -> bool:
    return any(te < t and t - te <= ttl for te in times)


def test_ranker_serves_no_old_version_value(switch_run: dict[str, Any]) -> None:
    """Exact and aggregate hits of the B ranker are explained by B embeddings alone; fresh A
    pairs existed that an ungated reader would have served."""
    s: Settings = switch_run["settings"]
    pairs: dict[tuple[str, int, int], list[int]] = defaultdict(list)
    users: dict[tuple[str, int], list[int]] = defaultdict(list)
    for batch in switch_run["embeddings"]:
        for item in batch.item_ids:
            pairs[(batch.model_version, batch.user_id, item)].append(batch.event_time_ms)
        users[(batch.model_version, batch.user_id)].append(batch.event_time_ms)
    a, b = switch_run["a"], switch_run["b"]
    scores = switch_run["scores"]
    assert {r["request_id"] for r in scores} == switch_run["second_ids"]
    exact = aggregate = tempting = 0
    for r in scores:
        u, t = r["user_id"], r["event_time_ms"]
        for item, tier in zip(r["items"], r["tiers"], strict=True):
            fresh_a = _fresh(pairs[(a, u, item)], t, s.pair_ttl_ms)
            fresh_b = _fresh(pairs[(b, u, item)], t, s.pair_ttl_ms)
            tempting += fresh_a and not fresh_b
            if tier == Tier.EXACT:
                exact += 1
                assert fresh_b, (r["request_id"], item)
            elif tier == Tier.AGGREGATE:
                aggregate += 1
                assert _fresh(users[(b, u)], t, s.aggregate_ttl_ms), (r["request_id"], item)
    print(f"after the switch: {exact} exact, {aggregate} aggregate hits; {tempting} fresh A-only")
    assert tempting > 0, "no fresh A pair after the switch: the test could not fail"
    assert exact + aggregate > 0


def test_no_aggregate_mixes_versions(switch_run: dict[str, Any]) -> None:
    """Each user's final aggregate is the mean of their B embeddings alone (folded in topic
    order with the engine's aggregator, A embeddings left out)."""
    from streams.engine.aggregator import AggregateState, RollingAggregator

    s: Settings = switch_run["settings"]
    b = switch_run["b"]
    only_b: dict[int, list[PairEmbedding]] = defaultdict(list)
    every: dict[int, list[PairEmbedding]] = defaultdict(list)
    for batch in switch_run["embeddings"]:
        every[batch.user_id].extend(batch.pairs())
        if batch.model_version == b:
            only_b[batch.user_id].extend(batch.pairs())
    prefix = s.key_prefix
    assert only_b
    users_with_a_in_window = 0
    for user, embs in only_b.items():
        want = RollingAggregator(s.aggregate_window_ms, s.aggregate_bucket_ms).add(
            AggregateState(), embs
        )
        assert want is not None
        got = decode_vector(switch_run["after"][f"{prefix}:{{u{user}}}:agg".encode()])
        assert (got.count, got.version_tag) == (want.count, version_tag(b)), user
        np.testing.assert_allclose(got.array(), want.array(), rtol=1e-3, atol=1e-3)
        a_in_window = [
            e
            for e in every[user]
            if e.model_version != b and want.event_time_ms - e.event_time_ms < s.aggregate_window_ms
        ]
        users_with_a_in_window += bool(a_in_window)
    print(f"{len(only_b)} B aggregates; {users_with_a_in_window} users with A pairs in window")
    assert users_with_a_in_window > 0, "no user had A embeddings in the window: could not fail"


def test_ranker_stays_up_and_ignores_foreign_snapshots(switch_run: dict[str, Any]) -> None:
    stats = switch_run["stats"]
    print(f"timings {switch_run['timings']}; ranker stats {stats}")
    assert stats.get("requests", 0) >= len(switch_run["second_ids"])
    assert stats.get("ignored_snapshots", 0) >= 1, stats

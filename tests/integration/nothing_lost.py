"""Nothing lost after a fault: every verified pair stored with its newest time and the vector
the FM gives for the history its ``verified`` message carried, aggregates equal to the ones
folded from the run's own ``embeddings``, counts as the simulator's, and no pair verified twice
by first tries (the verify step skips a redelivered request by its ledger: a pair verified again
means the ledger state was lost). Copies a batch's *retry* sent are not a loss: a retry runs
the whole batch again and re-sends what the failed try had delivered, or had sent into a broker
that wrote it before its acknowledgement was lost (at-least-once); such messages carry the
try's number in a header (``streams.live.sends.ATTEMPT_HEADER``) and are counted apart. FM
redeliveries, pairs *embedded* twice, are not a problem either."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from streams.settings import Settings
from tests.integration.live_harness import read_topic, read_topic_messages

#: (user, item, event time) of a verified pair
Pair = tuple[int, int, int]


@dataclass
class LossReport:
    """What a faulted run kept, against its own topics and a clean simulator run."""

    verified: int = 0  #: distinct (user, item, time) in ``verified``
    verified_duplicates: int = 0  #: extra copies of a pair in ``verified`` (any cause)
    #: pairs in ``verified`` more than once whose extra copies a batch retry sent (at-least-once)
    verified_resent: int = 0
    #: pairs sent to ``verified`` by more than one *first* try: a request verified again, i.e.
    #: the ledger state that marks it verified was lost (a rebalance or restart that did not
    #: recover the table)
    verified_twice: list[Pair] = field(default_factory=list)
    #: the first few of those with the partition:offset and batch try of each copy in
    #: ``verified`` (adjacent offsets: sent twice by one worker; far apart: after a re-read)
    twice_at: list[str] = field(default_factory=list)
    embedding_duplicates: int = 0  #: extra copies in ``embeddings`` (FM redeliveries)
    missing_in_store: list[tuple[int, int]] = field(default_factory=list)
    stale_in_store: list[tuple[int, int]] = field(default_factory=list)  #: older time than verified
    missing_in_embeddings: list[Pair] = field(default_factory=list)
    #: stored pair vectors that are not the FM's on their verified message (more than one
    #: float16 ulp apart: FM groups of other sizes may round differently)
    wrong_vectors: list[str] = field(default_factory=list)
    vectors_checked: int = 0  #: stored pair vectors compared with the FM's
    aggregates: int = 0
    #: stored aggregates differing from the one folded from the run's own embeddings
    aggregate_mismatch: list[str] = field(default_factory=list)
    #: users with an aggregate folded from the run's embeddings but none in the store (lost on a
    #: Redis restart, evicted at maxmemory, or never written)
    aggregates_absent: list[int] = field(default_factory=list)
    only_live: list[Pair] = field(default_factory=list)  #: verified, not by the simulator
    only_simulated: list[Pair] = field(default_factory=list)
    #: where the live run lost the requests of ``only_simulated`` (stage → (user, time)):
    #: no ``speculated`` message for the request, or speculated but not verified
    lost_at: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    #: stored aggregates with another count or time than the simulator's, or not the simulator's
    aggregate_vs_simulator: list[str] = field(default_factory=list)
    #: aggregate keys the simulator wrote and the store lacks
    aggregates_absent_vs_simulator: list[str] = field(default_factory=list)
    histories_differing: int = 0  #: pairs embedded with another history than the simulator's

    def problems(self) -> list[str]:
        """Each way in which something was lost or counted twice (empty = nothing lost)."""
        checks: dict[str, list[Any]] = {
            "verified pairs missing in the store": self.missing_in_store,
            "pairs stored with an older event time than verified": self.stale_in_store,
            "verified pairs missing in the embeddings topic": self.missing_in_embeddings,
            "pairs stored with another vector than the FM's on their verified history": (
                self.wrong_vectors
            ),
            "pairs verified more than once (lost ledger state)": self.verified_twice,
            "aggregates differing from the run's own embeddings": self.aggregate_mismatch,
            "users with no aggregate in the store": self.aggregates_absent,
            "pairs verified live but not by the simulator": self.only_live,
            f"pairs verified by the simulator but not live (requests {self.lost_at})": (
                self.only_simulated
            ),
            "aggregates differing from the simulator's (count, time, users)": (
                self.aggregate_vs_simulator
            ),
            "simulator's aggregates missing in the store": self.aggregates_absent_vs_simulator,
        }
        found = [f"{len(v)} {k}, e.g. {v[:3]}" for k, v in checks.items() if v]
        if self.verified_twice:
            found.append(f"copies of pairs verified twice: {self.twice_at}")
        return found

    def assert_nothing_lost(self, context: str = "") -> None:
        """Fail with every problem found; ``context`` (e.g. the run's measured line) is added
        to the message, so a failure in CI says what the run went through."""
        assert self.verified > 0, "nothing was verified: the run did not exercise the pipeline"
        assert self.aggregates > 0, "no aggregate in the store"
        assert self.vectors_checked > 0, "no stored pair vector was compared with the FM's"
        problems = self.problems()
        assert not problems, "; ".join(problems) + (f" (run: {context})" if context else "")


@dataclass
class Verified:
    """The run's ``verified`` topic: copies of each pair, its history, its message."""

    seen: Counter[Pair] = field(default_factory=Counter)
    histories: dict[Pair, tuple[Any, ...]] = field(default_factory=dict)
    messages: dict[Pair, Any] = field(default_factory=dict)  #: the ProposalBatch carrying it
    #: where each copy of a pair sits in the topic, "partition:offset" (for a failure message)
    positions: dict[Pair, list[str]] = field(default_factory=dict)
    #: the batch try that sent each copy (1: a first try; more: a retry's re-send)
    attempts: dict[Pair, list[int]] = field(default_factory=dict)

    def first_try_copies(self, pair: Pair) -> int:
        """Copies of ``pair`` sent by first tries: more than one means it was verified again."""
        return sum(1 for a in self.attempts[pair] if a == 1)


def split_copies(run: Verified) -> tuple[list[Pair], int]:
    """The pairs sent more than once by first tries (verified again: lost ledger state), and
    how many pairs' extra copies were all a batch retry's re-sends (at-least-once)."""
    again = sorted(k for k in run.seen if run.first_try_copies(k) > 1)
    resent = sum(1 for n in run.seen.values() if n > 1) - len(again)
    return again, resent


def _verified(settings: Settings) -> Verified:
    from schemas.codec import Codec
    from schemas.limits import Limits
    from schemas.records import ProposalBatch

    codec = Codec(Limits(max_candidates=settings.max_candidates))
    out = Verified()
    for message in read_topic_messages(settings, settings.topic("verified")):
        b = codec.decode(message.value, ProposalBatch)
        hist = (tuple(b.history_items), tuple(b.history_labels), tuple(b.history_times_ms))
        for item in b.item_ids:
            pair = (b.user_id, item, b.event_time_ms)
            out.seen[pair] += 1
            out.histories[pair] = hist
            out.messages[pair] = b
            out.positions.setdefault(pair, []).append(f"{message.partition}:{message.offset}")
            out.attempts.setdefault(pair, []).append(message.attempt())
    return out


def _wrong_vectors(
    settings: Settings, bundle: Path, newest: dict[Pair, Any], stored: dict[Pair, Any]
) -> tuple[list[str], int]:
    """Each stored pair (``stored``: (u, i, t) → decoded value) against the FM run on the
    verified message it came from (``newest``), one message per FM call, as the simulator
    embeds: a pair embedded live with another pair's history, or none, shows here even when
    the live FM groups held many messages (lockstep parity sees one message per group)."""
    from streams.engine.embedder import Embedder
    from streams.engine.steps.embed import embed_input
    from streams.models_loader import load_models

    models = load_models(settings, bundle)[0]
    embedder = Embedder(models.fm, split=models.state)  # the FM worker's (and simulator's) path
    wrong: list[str] = []
    checked = 0
    messages = {id(b): b for b in newest.values()}
    for b in messages.values():
        item = embed_input(None, b)
        for e in embedder.embed_messages([item.batch], [item.history]):
            got = stored.get((e.user_id, e.item_id, e.event_time_ms))
            if got is None:
                continue  # a newer copy was stored (or none): reported elsewhere
            checked += 1
            want = np.frombuffer(e.vector, np.float16)
            have = np.asarray(got.array(), np.float16)
            ulp = np.spacing(np.maximum(np.abs(want), np.abs(have)))
            if want.shape != have.shape or bool(np.any(np.abs(want - have) > ulp)):
                delta = float(np.max(np.abs(want.astype(np.float32) - have.astype(np.float32))))
                wrong.append(f"({e.user_id}, {e.item_id}) max |d| {delta:.4f}")
    return sorted(wrong), checked


def folded_aggregates(settings: Settings) -> tuple[Counter[Pair], dict[int, Any]]:
    """Copies of each pair in ``embeddings`` and each user's aggregate folded from them (topic
    order per partition = the aggregate agent's order) by the engine's own aggregator."""
    from schemas.codec import Codec
    from schemas.records import EmbeddingBatch
    from streams.engine.aggregator import AggregateState, RollingAggregator

    codec = Codec()
    aggregator = RollingAggregator(settings.aggregate_window_ms, settings.aggregate_bucket_ms)
    copies: Counter[Pair] = Counter()
    states: dict[int, AggregateState] = {}
    last: dict[int, Any] = {}
    for _, value in read_topic(settings, settings.topic("embeddings")):
        rec = codec.decode(value, EmbeddingBatch)
        copies.update((rec.user_id, i, rec.event_time_ms) for i in rec.item_ids)
        agg = aggregator.add(states.setdefault(rec.user_id, AggregateState()), rec.pairs())
        if agg is not None:
            last[rec.user_id] = agg
    return copies, last


def _store_values(settings: Settings) -> dict[bytes, bytes]:
    """Every value under the run's key prefix (on a Redis Cluster: scanned on every master)."""
    import redis
    from redis.cluster import RedisCluster

    match = f"{settings.key_prefix}:*"
    if settings.store_backend == "redis-cluster":
        cluster = RedisCluster.from_url(settings.store_url, socket_timeout=10)
        try:
            keys = sorted(cluster.scan_iter(match=match, count=1000))
            values = cluster.mget_nonatomic(keys) if keys else []
        finally:
            cluster.close()
        return {k: v for k, v in zip(keys, values, strict=True) if isinstance(v, bytes)}
    client = redis.Redis.from_url(settings.store_url, socket_timeout=10)
    try:
        keys = sorted(client.scan_iter(match=match, count=1000))
        values = client.mget(keys) if keys else []
    finally:
        client.close()
    return {k: v for k, v in zip(keys, values, strict=True) if isinstance(v, bytes)}


def check_nothing_lost(settings: Settings, traffic: Path, bundle: Path) -> LossReport:
    """Read the run's ``verified`` and ``embeddings`` topics and the store back, run the
    simulator on the same traffic, and report every difference (see the module docstring)."""
    from store.keys import KeyLayout
    from store.values import decode_vector

    report = LossReport()
    run = _verified(settings)
    verified, histories = run.seen, run.histories
    report.verified = len(verified)
    report.verified_duplicates = sum(n - 1 for n in verified.values())
    report.verified_twice, report.verified_resent = split_copies(run)
    report.twice_at = [
        f"{k} at {run.positions[k]} (tries {run.attempts[k]})" for k in report.verified_twice[:3]
    ]
    copies, folded = folded_aggregates(settings)
    report.embedding_duplicates = sum(n - 1 for n in copies.values())
    report.missing_in_embeddings = sorted(set(verified) - set(copies))

    layout, stored = KeyLayout(settings.key_prefix), _store_values(settings)
    newest: dict[tuple[int, int], int] = {}
    for u, i, t in verified:
        newest[(u, i)] = max(t, newest.get((u, i), t))
    current: dict[Pair, Any] = {}
    for (u, i), t in sorted(newest.items()):
        raw = stored.get(layout.pair(u, i))
        if raw is None:
            report.missing_in_store.append((u, i))
        elif (value := decode_vector(raw)).event_time_ms < t:
            report.stale_in_store.append((u, i))
        else:
            current[(u, i, value.event_time_ms)] = value
    newest_messages = {k: run.messages[k] for k in current if k in run.messages}
    report.wrong_vectors, report.vectors_checked = _wrong_vectors(
        settings, bundle, newest_messages, current
    )

    live_aggs = {
        u: decode_vector(stored[layout.aggregate(u)])
        for u in folded
        if layout.aggregate(u) in stored
    }
    report.aggregates = len(live_aggs)
    for u, want in sorted(folded.items()):
        got = live_aggs.get(u)
        if got is None:
            report.aggregates_absent.append(u)
        elif (got.count, got.event_time_ms) != (want.count, want.event_time_ms) or not np.allclose(
            got.array(), want.array(), rtol=0, atol=1e-6
        ):
            report.aggregate_mismatch.append(
                f"user {u}: store count {got.count} t {got.event_time_ms}, "
                f"folded count {want.count} t {want.event_time_ms}"
            )
    _compare_with_simulator(settings, traffic, bundle, report, histories, stored)
    return report


def _lost_at(settings: Settings, pairs: list[Pair]) -> dict[str, list[tuple[int, int]]]:
    """For requests the simulator verified and the live run did not: did the live ``speculate``
    step propose anything for them (a ``speculated`` message), and with which items?"""
    from schemas.codec import Codec
    from schemas.limits import Limits
    from schemas.records import ProposalBatch

    codec = Codec(Limits(max_candidates=settings.max_candidates))
    wanted = {(u, t) for u, _, t in pairs}
    proposed: dict[tuple[int, int], set[int]] = {}
    for _, value in read_topic(settings, settings.topic("speculated")):
        b = codec.decode(value, ProposalBatch)
        if (b.user_id, b.event_time_ms) in wanted:
            proposed.setdefault((b.user_id, b.event_time_ms), set()).update(b.item_ids)
    out: dict[str, list[tuple[int, int]]] = {}
    for u, i, t in pairs:
        items = proposed.get((u, t))
        stage = (
            "not speculated"
            if items is None
            else ("speculated, not verified" if i in items else "speculated without this item")
        )
        if (u, t) not in out.setdefault(stage, []):
            out[stage].append((u, t))
    return out


def _compare_with_simulator(
    settings: Settings,
    traffic: Path,
    bundle: Path,
    report: LossReport,
    histories: dict[Pair, tuple[Any, ...]],
    stored: dict[bytes, bytes],
) -> None:
    """The clean run: the simulator on the same traffic with the same settings and bundle."""
    from models.data.traffic import read_traffic
    from store.values import decode_vector
    from tests.integration.value_parity import simulated_for

    sim = simulated_for(settings, bundle, read_traffic(traffic))
    report.only_live = sorted(set(histories) - set(sim.histories))
    report.only_simulated = sorted(set(sim.histories) - set(histories))
    if report.only_simulated:
        report.lost_at = _lost_at(settings, report.only_simulated)
    report.histories_differing = sum(
        1 for k, h in sim.histories.items() if k in histories and histories[k] != h
    )
    live_aggs = {k: v for k, v in stored.items() if k.endswith(b":agg")}
    for key in sorted(live_aggs.keys() | sim.aggregates.keys()):
        if key not in live_aggs:
            report.aggregates_absent_vs_simulator.append(key.decode())
            continue
        if key not in sim.aggregates:
            report.aggregate_vs_simulator.append(f"{key.decode()} only in the live run")
            continue
        a, b = decode_vector(live_aggs[key]), decode_vector(sim.aggregates[key])
        if (a.count, a.event_time_ms) != (b.count, b.event_time_ms):
            report.aggregate_vs_simulator.append(
                f"{key.decode()}: live count {a.count} t {a.event_time_ms}, "
                f"simulator count {b.count} t {b.event_time_ms}"
            )

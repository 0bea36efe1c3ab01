"""A worker killed right after a commit leaves its table state behind for the next owner.

Faust sends table updates to the changelog through a buffer (``send_soon``), and its commit
only *tries* to flush that buffer: ``ProducerBuffer.flush`` gives up after 0.1 s without a send.
Under load a commit can therefore cover a batch whose table updates are still unsent; kill the
worker then and the partition's next owner restores older state. Seen once in the join/leave
fault test at load 6-11: two users' stored aggregates held 10 and 88 pairs where the run's own
``embeddings`` fold to 44 and 131.

Here the window is made wide on purpose, on both changelog paths (``SOLARIS_AGENT_SENDS``):
with Faust's producer each buffered send of the first aggregate worker takes 0.3 s (a
``sitecustomize`` on the child's ``PYTHONPATH`` wraps Faust's buffer; the code under test is
unchanged); with librdkafka (the default) every message lingers 0.3 s in librdkafka's queue.
Embeddings go in, the group commits them all, the worker is killed at once, a fresh worker
takes over, one more embedding per user goes in, and every user's stored aggregate must equal
the one folded from the topic.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.integration

USERS = (1, 2, 3, 4, 5, 6, 7, 8)
ROUNDS = 6
ITEMS = 4
T0 = 1_704_067_200_000

SLOW_CHANGELOG = """
import asyncio

from faust.transport import producer as _producer

_send = _producer.ProducerBuffer._send_pending


async def _slow_send(self, fut):
    await asyncio.sleep({delay})
    await _send(self, fut)


_producer.ProducerBuffer._send_pending = _slow_send
print("{marker}", flush=True)
"""
#: printed by the child once Faust's buffer is wrapped (a failing ``sitecustomize`` is only
#: reported by ``site``, and the worker would then run at full speed)
SLOWED = "test: Faust's buffered sends slowed"


def _embedding(user: int, n: int, version: str, dim: int) -> object:
    from schemas.records import EmbeddingBatch

    rng = np.random.default_rng(user * 100 + n)
    items = tuple(range(1000 + n * ITEMS, 1000 + (n + 1) * ITEMS))
    vectors = rng.standard_normal((ITEMS, dim)).astype(np.float16)
    t = T0 + n * 60_000
    return EmbeddingBatch(
        f"r{user}-{n}", user, t, version, "FLOAT16", dim, items, vectors.astype("<f2").tobytes()
    )


def _produce(settings: object, records: list[object]) -> None:
    from schemas.codec import Codec
    from streams.kafka_clients import make_producer
    from streams.live.agents.context import user_key

    codec, producer = Codec(), make_producer(settings)  # type: ignore[arg-type]
    for rec in records:
        producer.produce(
            settings.topic("embeddings"),  # type: ignore[attr-defined]
            key=user_key(rec.user_id),  # type: ignore[attr-defined]
            value=codec.encode(rec),
        )
    assert producer.flush(10) == 0


def _wait_committed(settings: object, group: str, timeout_s: float = 120) -> None:
    from streams.lag import LagReader

    reader = LagReader(settings)  # type: ignore[arg-type]
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            lags = reader.lag([group], [settings.topic("embeddings")])  # type: ignore[attr-defined]
            if lags and all(p.lag == 0 for p in lags):
                return
            time.sleep(0.02)
    finally:
        reader.close()
    raise TimeoutError(f"{group} did not commit every embedding in {timeout_s:.0f} s")


def _slowed_first_worker(sends: str, tmp_path: Path) -> dict[str, str]:
    """The first worker's environment: its changelog sends made slow on the path ``sends``
    names. Faust's buffer is wrapped; librdkafka holds every message 300 ms in its own queue
    (its linger), so a batch acked before its deliveries would lose them to the kill."""
    from streams.settings import REPO_ROOT

    env = {"SOLARIS_STATE_DIR": str(tmp_path / "first"), "SOLARIS_AGENT_SENDS": sends}
    if sends == "librdkafka":
        return {**env, "SOLARIS_PRODUCER_LINGER_MS": "300"}
    slow = tmp_path / "slow-changelog"
    slow.mkdir()
    (slow / "sitecustomize.py").write_text(SLOW_CHANGELOG.format(delay=0.3, marker=SLOWED))
    return {**env, "PYTHONPATH": f"{slow}:{REPO_ROOT}"}


def _persisted_offsets(state_dir: Path, table: str) -> dict[int, int]:
    """Each partition's changelog offset that a stopped worker's RocksDB table recorded
    (Faust restores the partition from the offset after it)."""
    from rocksdict import AccessType, Options, Rdict

    out = {}
    for path in sorted(state_dir.glob(f"*/v1/tables/{table}-*.db")):
        db = Rdict(str(path), options=Options(raw_mode=True), access_type=AccessType.read_only())
        try:
            raw = db.get(b"__faust\0offset__")
        finally:
            db.close()
        if raw is not None:
            out[int(path.name.rsplit("-", 1)[1].split(".")[0])] = int(raw)
    return out


@pytest.mark.parametrize("sends", ["librdkafka", "faust"])
def test_killed_worker_leaves_every_committed_table_update_to_the_next_owner(
    bundle: Path, tmp_path: Path, sends: str
) -> None:
    import redis

    from store.keys import KeyLayout
    from store.values import decode_vector
    from streams.lag import wait_for_groups
    from streams.topics import create_topics
    from tests.integration.fault_harness import FaultProcs
    from tests.integration.live_harness import fresh_live_settings
    from tests.integration.nothing_lost import folded_aggregates
    from tests.integration.redis_fault_helpers import end_offsets

    settings = fresh_live_settings(bundle, partitions=2)
    version = json.loads((bundle / "meta.json").read_text())["model_version"]
    dim = settings.embedding_dim
    group = f"{settings.topic_prefix}-pipeline"
    create_topics(settings)
    procs = FaultProcs(settings, tmp_path)
    try:
        procs.start(
            "first", "worker", "--agents", "aggregate", env=_slowed_first_worker(sends, tmp_path)
        )
        wait_for_groups(settings, [group], timeout_s=120)
        if sends == "faust":
            assert SLOWED in procs.log("first"), "the first worker's sends were not slowed"
        _produce(settings, [_embedding(u, n, version, dim) for n in range(ROUNDS) for u in USERS])
        _wait_committed(settings, group)
        procs.kill9("first")  # at once: its buffered changelog sends die with it
        procs.start(
            "second",
            "worker",
            "--agents",
            "aggregate",
            env={"SOLARIS_STATE_DIR": str(tmp_path / "second")},
        )
        wait_for_groups(settings, [group], timeout_s=120)
        _produce(settings, [_embedding(u, ROUNDS, version, dim) for u in USERS])
        _wait_committed(settings, group)
        time.sleep(0.5)  # the store write precedes the commit; leave it a moment anyway
    finally:
        procs.stop_all()
    # the next restart replays each changelog partition from its end, not from the start
    ends = end_offsets(settings, f"{group}-aggregates-changelog")
    newest = {p: end - 1 for p, end in ends.items() if end > 0}
    assert _persisted_offsets(tmp_path / "second", "aggregates") == newest
    _, folded = folded_aggregates(settings)
    layout = KeyLayout(settings.key_prefix)
    client = redis.Redis.from_url(settings.store_url)
    try:
        stored = {u: client.get(layout.aggregate(u)) for u in USERS}
    finally:
        client.close()
    want = {u: (folded[u].count, folded[u].event_time_ms) for u in USERS}
    got = {
        u: (v.count, v.event_time_ms)
        if (raw := stored[u]) is not None and (v := decode_vector(raw))
        else None
        for u in USERS
    }
    assert want == {u: ((ROUNDS + 1) * ITEMS, T0 + ROUNDS * 60_000) for u in USERS}
    assert got == want, (
        f"stored (count, time) per user differ from the folded ones: {got} vs {want}"
    )
    for u in USERS:  # and the vectors: the mean over every pair, not only the right count
        have = decode_vector(stored[u]).array()  # type: ignore[arg-type]
        assert np.allclose(have, folded[u].array(), rtol=0, atol=1e-6), f"user {u}'s mean differs"

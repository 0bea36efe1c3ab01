"""AerospikeStore over a fake client: result codes, TTL rounding, read order, chunked snapshots,
and the shared FeatureStore contract (no Aerospike server is needed)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

pytest.importorskip("aerospike", reason="the 'aerospike' extra is not installed")

from aerospike import exception as aero_exc

from schemas.records import NeighbourList, UserAggregate
from schemas.vectors import VectorDtype
from store.aerospike_store import AerospikeStore, ttl_seconds
from store.errors import StoreRefused, StoreTimeout, StoreUnavailable
from store.protocol import ReadBatch
from store.values import encode_aggregate, encode_neighbours, encode_pair
from tests.contract.store_contract import HOUR, T0, StoreContract, pair
from tests.fakes_aerospike import (
    NO_RESPONSE,
    RECORD_TOO_BIG,
    FakeAerospikeClient,
    make_error,
)

MiB = 1 << 20


class _Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> int:
        return self.now


@pytest.fixture()
def clock() -> _Clock:
    return _Clock()


@pytest.fixture()
def fake(clock: _Clock) -> FakeAerospikeClient:
    return FakeAerospikeClient(clock_ms=clock)


@pytest.fixture()
def store(fake: FakeAerospikeClient) -> AerospikeStore:
    return AerospikeStore("fake:3000", "test", "t", client=fake)


@pytest.fixture()
def advance(clock: _Clock) -> Callable[[int], None]:
    def _advance(ms: int) -> None:
        clock.now += ms

    return _advance


class TestAerospikeStoreOnFake(StoreContract):
    """The shared contract, with physical TTL on the fake's clock."""


# -- result codes ----------------------------------------------------------------------------


def test_partial_write_failure_names_count_and_first_code(
    store: AerospikeStore, fake: FakeAerospikeClient
) -> None:
    fake.record_errors["1:11"] = 14  # RecordBusy (hot key)
    fake.record_errors["1:13"] = 18  # DeviceOverload
    with pytest.raises(StoreUnavailable, match=r"2 of 4 records failed \(first result code 14\)"):
        store.write_pairs([pair(1, i) for i in (10, 11, 12, 13)], HOUR)
    fake.record_errors.clear()
    # the records that succeeded were written (a batch is not atomic)
    assert store.read(ReadBatch(pairs=[(1, 10), (1, 11)]), 500).pairs[1] is None


@pytest.mark.parametrize("code", [13, 8, 81])  # RecordTooBig, ServerFull, RoleViolation
def test_a_refusal_raises_store_refused_not_a_retryable_error(
    store: AerospikeStore, fake: FakeAerospikeClient, code: int
) -> None:
    """A server that answers "no" says the same on every retry: StoreRefused, which the
    writers' retry loop does not repeat (a plain StoreUnavailable was retried for ever while
    /readyz said 200)."""
    fake.record_errors["1:11"] = code
    with pytest.raises(StoreRefused, match=f"refused: code {code}"):
        store.write_pairs([pair(1, i) for i in (10, 11)], HOUR)


def test_a_refusing_client_exception_is_store_refused(
    store: AerospikeStore, fake: FakeAerospikeClient
) -> None:
    fake.raise_next["batch_write"] = make_error(aero_exc.RoleViolation, "no write role")
    with pytest.raises(StoreRefused, match="no write role"):
        store.write_pairs([pair(1, 10)], HOUR)
    fake.raise_next["batch_write"] = make_error(aero_exc.ClusterError, "node gone")
    with pytest.raises(StoreUnavailable) as raised:
        store.write_pairs([pair(1, 10)], HOUR)
    assert not isinstance(raised.value, StoreRefused)


def test_not_found_reads_none_and_found_reads_the_value(store: AerospikeStore) -> None:
    rec = pair(2, 20, seed=7)
    store.write_pairs([rec], HOUR)
    res = store.read(ReadBatch(pairs=[(2, 21), (2, 20)]), 500)
    assert res.pairs == [None, encode_pair(rec)]


def test_batch_read_timeout_reported_in_result_codes_raises_store_timeout(
    store: AerospikeStore, fake: FakeAerospikeClient
) -> None:
    store.write_pairs([pair(3, 30)], HOUR)
    fake.timeout_next.add("batch_read")  # the client does not raise: result 9, records -15
    with pytest.raises(StoreTimeout, match="timed out"):
        store.read(ReadBatch(pairs=[(3, 30), (3, 31)]), 20)


def test_batch_read_timeout_exception_raises_store_timeout(
    store: AerospikeStore, fake: FakeAerospikeClient
) -> None:
    fake.raise_next["batch_read"] = make_error(aero_exc.TimeoutError, "Timeout")
    with pytest.raises(StoreTimeout):
        store.read(ReadBatch(pairs=[(3, 30)]), 20)


def test_write_timeout_raises_store_timeout(
    store: AerospikeStore, fake: FakeAerospikeClient
) -> None:
    fake.timeout_next.add("batch_write")
    with pytest.raises(StoreTimeout):
        store.write_pairs([pair(3, 30)], HOUR)
    fake.raise_next["batch_write"] = make_error(aero_exc.TimeoutError, "Timeout")
    with pytest.raises(StoreTimeout):
        store.write_pairs([pair(3, 30)], HOUR)


def test_read_record_error_other_than_not_found_is_unavailable(
    store: AerospikeStore, fake: FakeAerospikeClient
) -> None:
    fake.record_errors["4:40"] = NO_RESPONSE
    with pytest.raises(StoreUnavailable, match="1 of 2 records failed"):
        store.read(ReadBatch(pairs=[(4, 40), (4, 41)]), 500)


def test_client_errors_become_store_unavailable(
    store: AerospikeStore, fake: FakeAerospikeClient
) -> None:
    fake.raise_next["batch_write"] = make_error(aero_exc.ParamError, "bad bin")
    with pytest.raises(StoreUnavailable, match="bad bin"):
        store.write_pairs([pair(5, 50)], HOUR)
    store.close()
    assert not store.ping()
    with pytest.raises(StoreUnavailable):
        store.read(ReadBatch(pairs=[(5, 50)]), 500)


def test_snapshot_query_errors_are_translated(
    store: AerospikeStore, fake: FakeAerospikeClient
) -> None:
    fake.timeout_next.add("query")
    with pytest.raises(StoreTimeout):
        store.read_snapshots()
    fake.raise_next["query.results"] = make_error(aero_exc.NamespaceNotFound, "no namespace")
    with pytest.raises(StoreUnavailable, match="no namespace"):
        store.read_snapshots()


# -- TTL rounding ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ttl_ms", "seconds"),
    [(0, 1), (1, 1), (999, 1), (1_000, 1), (1_001, 2), (1_500, 2), (86_400_000, 86_400)],
)
def test_ttl_rounds_up_to_whole_seconds_at_least_one(
    store: AerospikeStore, fake: FakeAerospikeClient, ttl_ms: int, seconds: int
) -> None:
    assert ttl_seconds(ttl_ms) == seconds
    store.write_pairs([pair(6, 60)], ttl_ms)
    assert fake.records[("test", "t_pair", "6:60")].ttl_s == seconds


def test_value_lives_until_the_rounded_up_ttl(
    store: AerospikeStore, advance: Callable[[int], None]
) -> None:
    store.write_pairs([pair(6, 61)], ttl_ms=1_001)  # -> 2 s
    advance(1_999)
    assert store.read(ReadBatch(pairs=[(6, 61)]), 500).pairs[0] is not None
    advance(1)
    assert store.read(ReadBatch(pairs=[(6, 61)]), 500).pairs[0] is None


# -- one round trip, results split in order ---------------------------------------------------


def test_read_is_one_batch_in_pair_aggregate_neighbour_order(
    store: AerospikeStore, fake: FakeAerospikeClient
) -> None:
    vec = np.arange(8, dtype=np.float32)
    aggs = [
        UserAggregate.from_array(u, T0, HOUR, u, "fm-test", vec, VectorDtype.FLOAT32)
        for u in (7, 8)
    ]
    nbs = [NeighbourList(u, T0, (u + 1,), (0.5,)) for u in (7, 9)]
    pairs = [pair(7, 70, seed=1), pair(7, 72, seed=2)]
    store.write_pairs(pairs, HOUR)
    store.write_aggregates(aggs, HOUR)
    store.write_neighbours(nbs, HOUR)
    fake.calls.clear()
    batch = ReadBatch(pairs=[(7, 72), (7, 71), (7, 70)], aggregates=[8, 7, 9], neighbours=[9, 8, 7])
    res = store.read(batch, 500)
    assert [m for m, _ in fake.calls] == ["batch_read"] and store.round_trips == 1
    sent = [(k[1], k[2]) for k in fake.calls[0][1]]
    assert sent == [
        *[("t_pair", f"7:{i}") for i in (72, 71, 70)],
        *[("t_agg", u) for u in "879"],
        *[("t_nb", u) for u in "987"],
    ]
    assert res.pairs == [encode_pair(pairs[1]), None, encode_pair(pairs[0])]
    assert res.aggregates == [encode_aggregate(aggs[1]), encode_aggregate(aggs[0]), None]
    assert res.neighbours == [encode_neighbours(nbs[1]), None, encode_neighbours(nbs[0])]


# -- snapshots over the record-size limit ----------------------------------------------------


def _blob(n: int, seed: int) -> bytes:
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8).tobytes()


def test_fake_refuses_records_over_the_limit(fake: FakeAerospikeClient) -> None:
    unchunked = AerospikeStore("fake", "test", "t", client=fake, snapshot_chunk_bytes=4 * MiB)
    with pytest.raises(StoreUnavailable, match=f"first result code {RECORD_TOO_BIG}"):
        unchunked.write_snapshot("w1", _blob(3_500_000, 1), HOUR)


def test_large_snapshot_round_trips_in_chunks_under_the_limit(
    store: AerospikeStore, fake: FakeAerospikeClient
) -> None:
    data = _blob(3_500_000, 1)
    store.write_snapshot("w1", data, HOUR)
    chunks = [k for k in fake.records if k[1] == "t_snapc"]
    assert len(chunks) == 4  # 3.5 MB in 1,000,000-byte chunks
    assert store.read_snapshots() == {"w1": data}


def test_rewriting_a_smaller_snapshot_reads_back_the_smaller_one(store: AerospikeStore) -> None:
    big, small = _blob(3_500_000, 1), _blob(1_200_000, 2)
    store.write_snapshot("w1", big, HOUR)
    store.write_snapshot("w2", b"other", HOUR)
    store.write_snapshot("w1", small, HOUR)
    assert store.read_snapshots() == {"w1": small, "w2": b"other"}
    store.write_snapshot("w1", b"", HOUR)
    assert store.read_snapshots()["w1"] == b""


def test_half_written_snapshot_is_never_mixed(
    store: AerospikeStore, fake: FakeAerospikeClient
) -> None:
    old, new = _blob(2_500_000, 3), _blob(2_500_000, 4)
    store.write_snapshot("w1", old, HOUR)
    # the chunks of the rewrite land, its manifest write fails: old manifest, new chunks
    fake.record_errors["w1"] = 8
    with pytest.raises(StoreUnavailable):
        store.write_snapshot("w1", new, HOUR)
    del fake.record_errors["w1"]
    assert store.read_snapshots() == {}
    store.write_snapshot("w1", new, HOUR)
    assert store.read_snapshots() == {"w1": new}


def test_snapshot_rewritten_while_being_read_is_read_again(
    store: AerospikeStore, fake: FakeAerospikeClient
) -> None:
    old, new = _blob(2_500_000, 3), _blob(2_500_000, 4)
    store.write_snapshot("w1", old, HOUR)
    # a worker rewrites w1 between the reader's manifest query and its chunk read
    fake.on_call["batch_read"] = lambda: store.write_snapshot("w1", new, HOUR)
    assert store.read_snapshots() == {"w1": new}
    assert [m for m, _ in fake.calls].count("query.results") == 2


def test_snapshot_names_come_from_the_manifest_not_the_sent_key(
    store: AerospikeStore, fake: FakeAerospikeClient
) -> None:
    store.write_snapshot("w9", b"abc", HOUR)
    (key, _meta, _bins) = fake.query("test", "t_snap").results()[0]
    assert key[2] is None  # batch writes store only the digest unless the policy sends keys
    assert store.read_snapshots() == {"w9": b"abc"}


def test_snapshot_expires_with_its_ttl(
    store: AerospikeStore, advance: Callable[[int], None]
) -> None:
    store.write_snapshot("w1", _blob(1_500_000, 5), ttl_ms=1_000)
    advance(1_000)
    assert store.read_snapshots() == {}


def test_snapshots_are_read_with_query_not_deprecated_scan(
    store: AerospikeStore, fake: FakeAerospikeClient
) -> None:
    assert not hasattr(fake, "scan")  # the fake has no scan: calling it would fail
    store.write_snapshot("w1", b"x", HOUR)
    fake.calls.clear()
    store.read_snapshots()
    assert [m for m, _ in fake.calls] == ["query.results", "batch_read"]


def test_chunk_size_must_be_positive(fake: FakeAerospikeClient) -> None:
    with pytest.raises(ValueError, match="positive"):
        AerospikeStore("fake", client=fake, snapshot_chunk_bytes=0)

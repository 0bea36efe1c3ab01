"""Aerospike backend (production): one ``batch_read`` per read, one ``batch_write`` per write.

Records live in three sets (``pair``, ``agg``, ``nb``) of one namespace, with the value in bin
``v`` and the TTL as record TTL (seconds, rounded up). Aerospike places records by key digest,
so there is no hash-tag concern; a batch read is one round trip per node involved.
The ``aerospike`` client is imported lazily: it is an optional extra (``solaris[aerospike]``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from schemas.records import NeighbourList, PairEmbedding, UserAggregate
from store.errors import StoreTimeout, StoreUnavailable
from store.protocol import ReadBatch, ReadResult
from store.values import encode_aggregate, encode_neighbours, encode_pair

_BIN = "v"
_WRITE_TIMEOUT_MS = 5_000


def parse_hosts(hosts: str) -> list[tuple[str, int]]:
    """``"h1:3000,h2"`` -> ``[("h1", 3000), ("h2", 3000)]``."""
    out = []
    for part in filter(None, (p.strip() for p in hosts.split(","))):
        host, _, port = part.partition(":")
        out.append((host, int(port) if port else 3000))
    if not out:
        raise ValueError("no Aerospike hosts given")
    return out


class AerospikeStore:
    """A :class:`~store.protocol.FeatureStore` on Aerospike."""

    def __init__(self, hosts: str, namespace: str = "test", set_prefix: str = "sol") -> None:
        try:
            import aerospike
            from aerospike import exception as aero_exc
        except ImportError as exc:
            raise StoreUnavailable(
                "install the 'aerospike' extra: pip install solaris[aerospike]"
            ) from exc
        self._aero_exc = aero_exc
        self.namespace = namespace
        self._sets = {k: f"{set_prefix}_{k}" for k in ("pair", "agg", "nb", "snap")}
        # Keys are sent (POLICY_KEY_SEND) so snapshot scans can name their records.
        config = {"hosts": parse_hosts(hosts), "policies": {"key": aerospike.POLICY_KEY_SEND}}
        try:
            self._client = aerospike.client(config).connect()
        except aero_exc.AerospikeError as exc:
            raise StoreUnavailable(f"cannot connect to Aerospike at {hosts}: {exc}") from exc
        self.round_trips = 0

    def _key(self, kind: str, ident: str) -> tuple[str, str, str]:
        return (self.namespace, self._sets[kind], ident)

    def _write(self, items: list[tuple[tuple[str, str, str], bytes]], ttl_ms: int) -> None:
        if not items:
            return
        from aerospike_helpers.batch.records import BatchRecords, Write
        from aerospike_helpers.operations import operations as ops

        ttl_s = max(1, math.ceil(ttl_ms / 1000))
        records = BatchRecords(
            [
                Write(key, [ops.write(_BIN, bytearray(value))], meta={"ttl": ttl_s})
                for key, value in items
            ]
        )
        try:
            result = self._client.batch_write(records, {"total_timeout": _WRITE_TIMEOUT_MS})
        except self._aero_exc.TimeoutError as exc:
            raise StoreTimeout(f"aerospike write timed out: {exc}") from exc
        except self._aero_exc.AerospikeError as exc:
            raise StoreUnavailable(f"aerospike write failed: {exc}") from exc
        failed = [br for br in result.batch_records if br.result != 0]
        if failed:
            raise StoreUnavailable(
                f"aerospike write: {len(failed)} of {len(items)} records failed "
                f"(first result code {failed[0].result})"
            )

    def write_pairs(self, pairs: Sequence[PairEmbedding], ttl_ms: int) -> None:
        self._write(
            [(self._key("pair", f"{r.user_id}:{r.item_id}"), encode_pair(r)) for r in pairs], ttl_ms
        )

    def write_aggregates(self, aggregates: Sequence[UserAggregate], ttl_ms: int) -> None:
        self._write(
            [(self._key("agg", str(r.user_id)), encode_aggregate(r)) for r in aggregates], ttl_ms
        )

    def write_neighbours(self, lists: Sequence[NeighbourList], ttl_ms: int) -> None:
        self._write(
            [(self._key("nb", str(r.user_id)), encode_neighbours(r)) for r in lists], ttl_ms
        )

    def write_snapshot(self, name: str, data: bytes, ttl_ms: int) -> None:
        self._write([(self._key("snap", name), data)], ttl_ms)

    def read_snapshots(self) -> dict[str, bytes]:
        out: dict[str, bytes] = {}
        try:
            for key, _meta, bins in self._client.scan(self.namespace, self._sets["snap"]).results():
                if bins and bins.get(_BIN) is not None and key[2] is not None:
                    out[str(key[2])] = bytes(bins[_BIN])
        except self._aero_exc.AerospikeError as exc:
            raise StoreUnavailable(f"aerospike snapshot scan failed: {exc}") from exc
        return out

    def read(self, batch: ReadBatch, timeout_ms: float) -> ReadResult:
        keys = [self._key("pair", f"{u}:{i}") for u, i in batch.pairs]
        keys += [self._key("agg", str(u)) for u in batch.aggregates]
        keys += [self._key("nb", str(u)) for u in batch.neighbours]
        if not keys:
            return ReadResult()
        self.round_trips += 1
        policy = {"total_timeout": max(1, int(timeout_ms)), "max_retries": 0}
        try:
            result = self._client.batch_read(keys, [_BIN], policy)
        except self._aero_exc.TimeoutError as exc:
            raise StoreTimeout(f"aerospike read exceeded {timeout_ms} ms") from exc
        except self._aero_exc.AerospikeError as exc:
            raise StoreUnavailable(f"aerospike read failed: {exc}") from exc
        values = [_value_of(br) for br in result.batch_records]
        n_pairs, n_aggs = len(batch.pairs), len(batch.aggregates)
        return ReadResult(
            pairs=values[:n_pairs],
            aggregates=values[n_pairs : n_pairs + n_aggs],
            neighbours=values[n_pairs + n_aggs :],
        )

    def ping(self) -> bool:
        return bool(self._client.is_connected())

    def close(self) -> None:
        self._client.close()


def _value_of(batch_record: Any) -> bytes | None:
    record = batch_record.record
    if batch_record.result != 0 or record is None:
        return None
    value = record[2].get(_BIN)
    return bytes(value) if value is not None else None

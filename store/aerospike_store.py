"""Aerospike backend (production): one ``batch_read`` per read, one ``batch_write`` per write
(pairs, aggregates and states: a ``batch_read`` then a guarded ``batch_write``, see below).

Records live in three sets (``pair``, ``agg``, ``nb``) of one namespace, with the value in bin
``v`` and the TTL as record TTL (seconds, rounded up). Aerospike places records by key digest,
so there is no hash-tag concern; a batch read is one round trip per node involved.

Batch commands report failures in result codes, not exceptions: the client sets
``BatchRecords.result`` (e.g. 9 = timeout) and each record's ``result`` (2 = not found), so
both are checked here and translated into :mod:`store.errors`.

Snapshots can outgrow Aerospike's record-size limit (1 MiB write-block by default), so each is
written as numbered chunk records (set ``snapc``) followed by a small manifest (set ``snap``:
name, write id, chunk count, size, CRC-32). Chunks are overwritten in place, so storage stays
bounded; a reader keeps a snapshot only if every chunk carries the manifest's write id and the
size and CRC match, so a torn or half-written snapshot is re-read or skipped, never mixed.
Pair, aggregate and state writes are conditional, with the rule the Redis scripts run (an older
event time never replaces a newer one of the same model; a state key keeps the two newest
states): check-and-set on the record generation, :mod:`store.aerospike_cas`. Neighbour lists,
histories and snapshots are written unconditionally, as on Redis.
The ``aerospike`` client is imported lazily: it is an optional extra (``solaris[aerospike]``).

Hosts, credentials and TLS: :mod:`store.aerospike_config`.
"""

from __future__ import annotations

import logging
import uuid
import zlib
from collections.abc import Mapping, Sequence
from typing import Any

from schemas.records import NeighbourList, PairEmbedding, UserAggregate
from store.aerospike_cas import (
    CONFLICT_CODES,
    DEFAULT_ATTEMPTS,
    GuardedWrite,
    Merge,
    Stored,
    group_in_order,
    plan,
)
from store.aerospike_config import AerospikeAuth, client_config, connect
from store.conditional_writes import newer_or_equal
from store.errors import StoreRefused, StoreTimeout, StoreUnavailable
from store.protocol import ReadBatch, ReadResult
from store.state_slots import StateWrites, merge_state, state_items
from store.values import encode_aggregate, encode_neighbours, encode_pair

log = logging.getLogger(__name__)

_BIN = "v"
_WRITE_TIMEOUT_MS = 5_000
_SNAPSHOT_TIMEOUT_MS = 10_000
#: 48 KiB under the default 1 MiB record limit, leaving room for key, bin names and metadata.
DEFAULT_SNAPSHOT_CHUNK_BYTES = 1_000_000
_CHUNKS_PER_BATCH = 8  # keeps one batch request of chunks near 8 MB
_SNAPSHOT_READ_ATTEMPTS = 3  # a snapshot rewritten while being read is read again

# Result codes (aerospike.exception.<class>.code), as set on BatchRecords and BatchRecord.
_OK = 0
_NOT_FOUND = 2  # RecordNotFound
_TIMEOUT = 9  # TimeoutError
_BATCH_FAILED = -16  # BatchFailed: some records of the batch failed (each says why)
_OK_ONLY = frozenset({_OK})
#: codes of a server that answered and refused: the same command is refused again until someone
#: acts (memory or quota, a record over the size limit, permissions, a wrong namespace, bin or
#: type), so writers must not retry it in place (``StoreRefused``, as Redis's OOM and NOPERM):
#: ParameterError 4, ServerFull 8, AlwaysForbidden 10, BinIncompatibleType 12, RecordTooBig 13,
#: UnsupportedFeature 16, NamespaceNotFound 20, BinNameError 21, ForbiddenError 22,
#: NotAuthenticated 80, RoleViolation 81, QuotaExceeded 83
_REFUSED = frozenset({4, 8, 10, 12, 13, 16, 20, 21, 22, 80, 81, 83})

Key = tuple[str, str, str]


def ttl_seconds(ttl_ms: int) -> int:
    """Record TTL in whole seconds, rounded up (never shorter than asked), at least 1 s.

    0 would mean the namespace default and -1 never expire in Aerospike, so never send those."""
    return max(1, -(-int(ttl_ms) // 1000))


class AerospikeStore:
    """A :class:`~store.protocol.FeatureStore` on Aerospike.

    ``client`` injects an already connected client (tests pass a fake); by default one is
    created and connected from ``hosts``.
    """

    def __init__(
        self,
        hosts: str,
        namespace: str = "test",
        set_prefix: str = "sol",
        *,
        client: Any | None = None,
        snapshot_chunk_bytes: int = DEFAULT_SNAPSHOT_CHUNK_BYTES,
        auth: AerospikeAuth | None = None,
    ) -> None:
        if snapshot_chunk_bytes < 1:
            raise ValueError(f"snapshot_chunk_bytes must be positive, not {snapshot_chunk_bytes}")
        try:
            from aerospike import exception as aero_exc
        except ImportError as exc:
            raise StoreUnavailable(
                "install the 'aerospike' extra: pip install solaris[aerospike]"
            ) from exc
        self._aero_exc = aero_exc
        self.namespace = namespace
        self.snapshot_chunk_bytes = snapshot_chunk_bytes
        self._sets = {
            k: f"{set_prefix}_{k}" for k in ("pair", "agg", "nb", "hist", "st", "snap", "snapc")
        }
        self._client = client if client is not None else connect(client_config(hosts, auth))
        #: Number of read round trips served (tests assert the reader's budget with it).
        self.round_trips = 0
        #: new values the conditional-write rule skipped (an older event time than stored)
        self.stale_skipped = 0
        #: keys written again because another writer changed them between read and write
        self.cas_retries = 0
        self.cas_attempts = DEFAULT_ATTEMPTS

    def _key(self, kind: str, ident: str) -> Key:
        return (self.namespace, self._sets[kind], ident)

    def _write(self, items: list[tuple[Key, dict[str, Any]]], ttl_ms: int) -> None:
        """One unconditional ``batch_write`` of whole records (bin name -> value), one TTL."""
        if not items:
            return
        from aerospike_helpers.batch.records import Write
        from aerospike_helpers.operations import operations as ops

        meta = {"ttl": ttl_seconds(ttl_ms)}
        records = [
            Write(key, [ops.write(b, v) for b, v in bins.items()], meta=meta) for key, bins in items
        ]
        self._send_writes(records)

    def _send_writes(self, records: list[Any], ok: frozenset[int] = _OK_ONLY) -> list[int]:
        """One ``batch_write``; each record's result code (raises unless all are in ``ok``)."""
        from aerospike_helpers.batch.records import BatchRecords

        try:
            result = self._client.batch_write(
                BatchRecords(records), {"total_timeout": _WRITE_TIMEOUT_MS}
            )
        except self._aero_exc.TimeoutError as exc:
            raise StoreTimeout(f"aerospike write timed out: {exc}") from exc
        except self._aero_exc.AerospikeError as exc:
            if getattr(exc, "code", None) in _REFUSED:
                raise StoreRefused(f"aerospike refused the write: {exc}") from exc
            raise StoreUnavailable(f"aerospike write failed: {exc}") from exc
        _check_batch("write", result, len(records), ok=ok)
        return [br.result for br in result.batch_records]

    def _write_newer(
        self, kind: str, items: list[tuple[str, bytes]], merge: Merge, ttl_ms: int
    ) -> None:
        """Check-and-set writes (:mod:`store.aerospike_cas`): per key, the rule ``merge`` folds
        the new values over the stored one and the result is written only if the record did
        not change since it was read; a key another writer changed meanwhile is tried again."""
        pending = group_in_order(items)
        for _ in range(self.cas_attempts):
            if not pending:
                return
            stored = self._read_stored(kind, list(pending))
            attempt = plan(stored, pending, merge)
            codes = self._send_guarded(kind, attempt.writes, ttl_ms)
            contended = {
                w.ident for w, code in zip(attempt.writes, codes, strict=True) if code != _OK
            }
            self.stale_skipped += sum(
                n for ident, n in attempt.skipped.items() if ident not in contended
            )
            self.cas_retries += len(contended)
            pending = {ident: pending[ident] for ident in contended}
        if pending:
            raise StoreUnavailable(
                f"aerospike conditional write: {len(pending)} {kind} records changed by other "
                f"writers on each of {self.cas_attempts} attempts"
            )

    def _read_stored(self, kind: str, idents: list[str]) -> dict[str, Stored]:
        keys = [self._key(kind, ident) for ident in idents]
        found = self._batch_read_records(keys, [_BIN], _WRITE_TIMEOUT_MS, max_retries=1)
        return {
            ident: Stored(_bytes(rec[2].get(_BIN)), int(rec[1]["gen"]))
            for ident, rec in zip(idents, found, strict=True)
            if rec is not None
        }

    def _send_guarded(self, kind: str, writes: list[GuardedWrite], ttl_ms: int) -> list[int]:
        if not writes:
            return []
        import aerospike
        from aerospike_helpers.batch.records import Write
        from aerospike_helpers.operations import operations as ops

        ttl = ttl_seconds(ttl_ms)
        replace = {"gen": aerospike.POLICY_GEN_EQ}
        create = {"exists": aerospike.POLICY_EXISTS_CREATE}
        records = [
            Write(
                self._key(kind, w.ident),
                [ops.write(_BIN, bytearray(w.value))],
                meta={"ttl": ttl, "gen": w.generation} if w.generation else {"ttl": ttl},
                policy=replace if w.generation else create,
            )
            for w in writes
        ]
        return self._send_writes(records, ok=_OK_ONLY | CONFLICT_CODES)

    def _write_values(self, items: list[tuple[Key, bytes]], ttl_ms: int) -> None:
        self._write([(key, {_BIN: bytearray(value)}) for key, value in items], ttl_ms)

    def write_pairs(self, pairs: Sequence[PairEmbedding], ttl_ms: int) -> None:
        """Conditional: an older event time never replaces a newer one of the same model."""
        items = [(f"{r.user_id}:{r.item_id}", encode_pair(r)) for r in pairs]
        self._write_newer("pair", items, _newer_or_equal, ttl_ms)

    def write_aggregates(self, aggregates: Sequence[UserAggregate], ttl_ms: int) -> None:
        """Conditional, like pairs."""
        items = [(str(r.user_id), encode_aggregate(r)) for r in aggregates]
        self._write_newer("agg", items, _newer_or_equal, ttl_ms)

    def write_neighbours(self, lists: Sequence[NeighbourList], ttl_ms: int) -> None:
        self._write_values(
            [(self._key("nb", str(r.user_id)), encode_neighbours(r)) for r in lists], ttl_ms
        )

    def write_histories(self, histories: Mapping[int, bytes], ttl_ms: int) -> None:
        self._write_values(
            [(self._key("hist", str(user)), value) for user, value in histories.items()], ttl_ms
        )

    def write_states(self, states: StateWrites, ttl_ms: int) -> None:
        """The state key's rule (:func:`~store.state_slots.merge_state`, as the Redis script):
        the two newest states per user, an older one never replaces the newest."""
        items = [(str(user), value) for user, value in state_items(states)]

        def merge(old: bytes | None, new: bytes) -> bytes | None:
            return merge_state(old, new, ttl_ms)

        self._write_newer("st", items, merge, ttl_ms)

    def _batch_read(
        self, keys: list[Key], bins: list[str], timeout_ms: float, max_retries: int
    ) -> list[dict[str, Any] | None]:
        """Bins of each key (``None`` = not found), in key order; errors become StoreErrors."""
        found = self._batch_read_records(keys, bins, timeout_ms, max_retries)
        return [rec[2] if rec is not None else None for rec in found]

    def _batch_read_records(
        self, keys: list[Key], bins: list[str], timeout_ms: float, max_retries: int
    ) -> list[tuple[Any, dict[str, Any], dict[str, Any]] | None]:
        """Each key's record ``(key, meta, bins)`` (``None`` = not found), in key order."""
        policy = {"total_timeout": max(1, int(timeout_ms)), "max_retries": max_retries}
        try:
            result = self._client.batch_read(keys, bins, policy)
        except self._aero_exc.TimeoutError as exc:
            raise StoreTimeout(f"aerospike read exceeded {timeout_ms} ms") from exc
        except self._aero_exc.AerospikeError as exc:
            raise StoreUnavailable(f"aerospike read failed: {exc}") from exc
        _check_batch("read", result, len(keys), ok=frozenset({_OK, _NOT_FOUND}))
        return [
            br.record if br.result == _OK and br.record is not None else None
            for br in result.batch_records
        ]

    def read(self, batch: ReadBatch, timeout_ms: float) -> ReadResult:
        keys = [self._key("pair", f"{u}:{i}") for u, i in batch.pairs]
        keys += [self._key("agg", str(u)) for u in batch.aggregates]
        keys += [self._key("nb", str(u)) for u in batch.neighbours]
        keys += [self._key("hist", str(u)) for u in batch.histories]
        keys += [self._key("st", str(u)) for u in batch.states]
        if not keys:
            return ReadResult()
        self.round_trips += 1
        found = self._batch_read(keys, [_BIN], timeout_ms, max_retries=0)
        values = [_bytes(bins.get(_BIN)) if bins else None for bins in found]
        return ReadResult.split(batch, values)

    def _chunk_key(self, name: str, index: int) -> Key:
        return self._key("snapc", f"{name}/{index}")

    def write_snapshot(self, name: str, data: bytes, ttl_ms: int) -> None:
        """Chunks first, manifest last: readers switch to the new snapshot only once whole."""
        size, write_id = self.snapshot_chunk_bytes, uuid.uuid4().hex
        chunks = [
            (self._chunk_key(name, i), {"w": write_id, _BIN: bytearray(data[start : start + size])})
            for i, start in enumerate(range(0, len(data), size))
        ]
        for start in range(0, len(chunks), _CHUNKS_PER_BATCH):
            self._write(chunks[start : start + _CHUNKS_PER_BATCH], ttl_ms)
        manifest = {
            "n": name,
            "w": write_id,
            "c": len(chunks),
            "z": len(data),
            "k": zlib.crc32(data),
        }
        self._write([(self._key("snap", name), manifest)], ttl_ms)

    def read_snapshots(self) -> dict[str, bytes]:
        """Every whole snapshot by name; one torn by a concurrent rewrite is read again."""
        torn: list[str] = []
        out: dict[str, bytes] = {}
        for _ in range(_SNAPSHOT_READ_ATTEMPTS):
            out, torn = self._assemble(self._manifests())
            if not torn:
                return out
        log.warning("skipping snapshots whose chunks do not match their manifest: %s", torn)
        return out

    def _manifests(self) -> list[dict[str, Any]]:
        # A query without a predicate reads the whole set (``scan`` is deprecated since 7.0).
        try:
            query = self._client.query(self.namespace, self._sets["snap"])
            rows = query.results({"total_timeout": _SNAPSHOT_TIMEOUT_MS})
        except self._aero_exc.TimeoutError as exc:
            raise StoreTimeout(f"aerospike snapshot query timed out: {exc}") from exc
        except self._aero_exc.AerospikeError as exc:
            raise StoreUnavailable(f"aerospike snapshot query failed: {exc}") from exc
        return [bins for _key, _meta, bins in rows if _is_manifest(bins)]

    def _assemble(self, manifests: list[dict[str, Any]]) -> tuple[dict[str, bytes], list[str]]:
        """(whole snapshots by name, names whose chunks belong to another write)."""
        keys = [self._chunk_key(m["n"], i) for m in manifests for i in range(m["c"])]
        chunks: list[dict[str, Any] | None] = []
        for start in range(0, len(keys), _CHUNKS_PER_BATCH):
            part = keys[start : start + _CHUNKS_PER_BATCH]
            chunks += self._batch_read(part, ["w", _BIN], _SNAPSHOT_TIMEOUT_MS, max_retries=2)
        out: dict[str, bytes] = {}
        torn: list[str] = []
        pos = 0
        for m in manifests:
            mine, pos = chunks[pos : pos + m["c"]], pos + m["c"]
            if any(c is None for c in mine):
                continue  # chunks expired just before their manifest: the snapshot is gone
            data = b"".join(_bytes(c.get(_BIN)) or b"" for c in mine if c is not None)
            whole = all(c is not None and c.get("w") == m["w"] for c in mine)
            if whole and len(data) == m["z"] and zlib.crc32(data) == m["k"]:
                out[m["n"]] = data
            else:
                torn.append(m["n"])
        return out, torn

    def ping(self) -> bool:
        return bool(self._client.is_connected())

    def close(self) -> None:
        self._client.close()


def _check_batch(op: str, result: Any, n: int, *, ok: frozenset[int]) -> None:
    """Raise unless every record of a batch got a result code in ``ok`` (reads: found or not
    found; guarded writes: written or lost to another writer)."""
    records = result.batch_records
    if len(records) != n:
        raise StoreUnavailable(f"aerospike {op}: {len(records)} results for {n} records")
    failed = [br for br in records if br.result not in ok]
    if result.result == _TIMEOUT or (failed and all(br.result == _TIMEOUT for br in failed)):
        raise StoreTimeout(f"aerospike {op} timed out ({len(failed)} of {n} records unanswered)")
    if failed:
        refused = [br.result for br in failed if br.result in _REFUSED]
        error = StoreRefused if refused else StoreUnavailable
        raise error(
            f"aerospike {op}: {len(failed)} of {n} records failed "
            f"(first result code {failed[0].result}"
            + (f"; refused: code {refused[0]}" if refused else "")
            + ")"
        )
    if result.result in _REFUSED:
        raise StoreRefused(f"aerospike {op} refused (batch result code {result.result})")
    if result.result not in (_OK, _BATCH_FAILED):
        raise StoreUnavailable(f"aerospike {op} failed (batch result code {result.result})")


def _newer_or_equal(old: bytes | None, new: bytes) -> bytes | None:
    """The pair and aggregate rule as a :data:`~store.aerospike_cas.Merge`."""
    return new if newer_or_equal(old, new) else None


def _is_manifest(bins: dict[str, Any] | None) -> bool:
    if not bins:
        return False
    types = {"n": str, "w": str, "c": int, "z": int, "k": int}
    return all(isinstance(bins.get(b), t) for b, t in types.items())


def _bytes(value: Any) -> bytes | None:
    return bytes(value) if value is not None else None

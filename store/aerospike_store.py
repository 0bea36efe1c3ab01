"""Aerospike backend (production): one ``batch_read`` per read, one ``batch_write`` per write.

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
The ``aerospike`` client is imported lazily: it is an optional extra (``solaris[aerospike]``).

A secured cluster takes :class:`AerospikeAuth`: user/password (internal authentication) and TLS
(the nodes' TLS name and the CA that signs their certificates); :func:`client_config` turns it
into the client's config dict.
"""

from __future__ import annotations

import logging
import uuid
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from schemas.records import NeighbourList, PairEmbedding, UserAggregate
from store.errors import StoreTimeout, StoreUnavailable
from store.protocol import ReadBatch, ReadResult
from store.state_slots import StateWrites, state_items
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

Key = tuple[str, str, str]


def parse_hosts(hosts: str) -> list[tuple[str, int]]:
    """``"h1:3000,h2"`` -> ``[("h1", 3000), ("h2", 3000)]``."""
    out = []
    for part in filter(None, (p.strip() for p in hosts.split(","))):
        host, _, port = part.partition(":")
        out.append((host, int(port) if port else 3000))
    if not out:
        raise ValueError("no Aerospike hosts given")
    return out


@dataclass(frozen=True, slots=True)
class AerospikeAuth:
    """Credentials and TLS of a secured Aerospike cluster; empty fields are not used.

    ``tls_name`` turns TLS on: it is the name the nodes' certificates carry (Aerospike checks
    it instead of the address). ``password`` is left out of ``repr`` so it is never logged.
    """

    user: str = ""
    password: str = field(default="", repr=False)
    tls_name: str = ""
    tls_cafile: str = ""


def client_config(hosts: str, auth: AerospikeAuth | None = None) -> dict[str, Any]:
    """The ``aerospike.client`` config for ``hosts`` and ``auth``.

    Raises ``ValueError`` for an inconsistent ``auth`` (a user without password or the reverse,
    a CA file without a TLS name, a CA file that does not exist)."""
    auth = auth or AerospikeAuth()
    problems = []
    if bool(auth.user) != bool(auth.password):
        problems.append("SOLARIS_AEROSPIKE_USER and SOLARIS_AEROSPIKE_PASSWORD go together")
    if auth.tls_cafile and not auth.tls_name:
        problems.append("SOLARIS_AEROSPIKE_TLS_CAFILE needs SOLARIS_AEROSPIKE_TLS_NAME")
    if auth.tls_cafile and not Path(auth.tls_cafile).is_file():
        problems.append(f"SOLARIS_AEROSPIKE_TLS_CAFILE={auth.tls_cafile} is not a readable file")
    if problems:
        raise ValueError("Aerospike security settings: " + "; ".join(problems))
    seeds = parse_hosts(hosts)
    config: dict[str, Any] = {"hosts": seeds}
    if auth.user:
        config["user"] = auth.user
        config["password"] = auth.password
    if auth.tls_name:
        config["hosts"] = [(host, port, auth.tls_name) for host, port in seeds]
        config["tls"] = {"enable": True}
        if auth.tls_cafile:
            config["tls"]["cafile"] = auth.tls_cafile
    return config


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
        self._client = client if client is not None else _connect(client_config(hosts, auth))
        #: Number of read round trips served (tests assert the reader's budget with it).
        self.round_trips = 0

    def _key(self, kind: str, ident: str) -> Key:
        return (self.namespace, self._sets[kind], ident)

    def _write(self, items: list[tuple[Key, dict[str, Any]]], ttl_ms: int) -> None:
        """One ``batch_write`` of whole records (bin name -> value), all with one TTL."""
        if not items:
            return
        from aerospike_helpers.batch.records import BatchRecords, Write
        from aerospike_helpers.operations import operations as ops

        meta = {"ttl": ttl_seconds(ttl_ms)}
        records = BatchRecords(
            [
                Write(key, [ops.write(b, v) for b, v in bins.items()], meta=meta)
                for key, bins in items
            ]
        )
        try:
            result = self._client.batch_write(records, {"total_timeout": _WRITE_TIMEOUT_MS})
        except self._aero_exc.TimeoutError as exc:
            raise StoreTimeout(f"aerospike write timed out: {exc}") from exc
        except self._aero_exc.AerospikeError as exc:
            raise StoreUnavailable(f"aerospike write failed: {exc}") from exc
        _check_batch("write", result, len(items), absent_ok=False)

    def _write_values(self, items: list[tuple[Key, bytes]], ttl_ms: int) -> None:
        self._write([(key, {_BIN: bytearray(value)}) for key, value in items], ttl_ms)

    def write_pairs(self, pairs: Sequence[PairEmbedding], ttl_ms: int) -> None:
        self._write_values(
            [(self._key("pair", f"{r.user_id}:{r.item_id}"), encode_pair(r)) for r in pairs], ttl_ms
        )

    def write_aggregates(self, aggregates: Sequence[UserAggregate], ttl_ms: int) -> None:
        self._write_values(
            [(self._key("agg", str(r.user_id)), encode_aggregate(r)) for r in aggregates], ttl_ms
        )

    def write_neighbours(self, lists: Sequence[NeighbourList], ttl_ms: int) -> None:
        self._write_values(
            [(self._key("nb", str(r.user_id)), encode_neighbours(r)) for r in lists], ttl_ms
        )

    def write_histories(self, histories: Mapping[int, bytes], ttl_ms: int) -> None:
        self._write_values(
            [(self._key("hist", str(user)), value) for user, value in histories.items()], ttl_ms
        )

    def write_states(self, states: StateWrites, ttl_ms: int) -> None:
        """Unconditional, like every Aerospike write (conditional writes: Redis and memory):
        one state per user, the last written (no previous state, see :mod:`store.state_slots`)."""
        last = dict(state_items(states))
        self._write_values(
            [(self._key("st", str(user)), value) for user, value in last.items()], ttl_ms
        )

    def _batch_read(
        self, keys: list[Key], bins: list[str], timeout_ms: float, max_retries: int
    ) -> list[dict[str, Any] | None]:
        """Bins of each key (``None`` = not found), in key order; errors become StoreErrors."""
        policy = {"total_timeout": max(1, int(timeout_ms)), "max_retries": max_retries}
        try:
            result = self._client.batch_read(keys, bins, policy)
        except self._aero_exc.TimeoutError as exc:
            raise StoreTimeout(f"aerospike read exceeded {timeout_ms} ms") from exc
        except self._aero_exc.AerospikeError as exc:
            raise StoreUnavailable(f"aerospike read failed: {exc}") from exc
        _check_batch("read", result, len(keys), absent_ok=True)
        return [
            br.record[2] if br.result == _OK and br.record is not None else None
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


def _connect(config: dict[str, Any]) -> Any:
    import aerospike
    from aerospike import exception as aero_exc

    try:
        return aerospike.client(config).connect()
    except aero_exc.AerospikeError as exc:
        seeds = ",".join(f"{h[0]}:{h[1]}" for h in config["hosts"])
        raise StoreUnavailable(f"cannot connect to Aerospike at {seeds}: {exc}") from exc


def _check_batch(op: str, result: Any, n: int, *, absent_ok: bool) -> None:
    """Raise unless every record of a batch succeeded (or, for reads, was just not found)."""
    records = result.batch_records
    if len(records) != n:
        raise StoreUnavailable(f"aerospike {op}: {len(records)} results for {n} records")
    failed = [
        br for br in records if br.result != _OK and not (absent_ok and br.result == _NOT_FOUND)
    ]
    if result.result == _TIMEOUT or (failed and all(br.result == _TIMEOUT for br in failed)):
        raise StoreTimeout(f"aerospike {op} timed out ({len(failed)} of {n} records unanswered)")
    if failed:
        raise StoreUnavailable(
            f"aerospike {op}: {len(failed)} of {n} records failed "
            f"(first result code {failed[0].result})"
        )
    if result.result != _OK:
        raise StoreUnavailable(f"aerospike {op} failed (batch result code {result.result})")


def _is_manifest(bins: dict[str, Any] | None) -> bool:
    if not bins:
        return False
    types = {"n": str, "w": str, "c": int, "z": int, "k": int}
    return all(isinstance(bins.get(b), t) for b, t in types.items())


def _bytes(value: Any) -> bytes | None:
    return bytes(value) if value is not None else None

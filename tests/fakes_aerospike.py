"""An in-process stand-in for the ``aerospike`` client, limited to what ``AerospikeStore`` uses.

It returns the real client's shapes (``aerospike_helpers.batch.records`` objects, record
tuples ``(key, meta, bins)`` with ``key = (ns, set, user_key | None, digest)``) and reports
failures the way the real client does (client source, 15.x-19.x): batch commands do *not* raise
on a timeout or a failed record, they set ``BatchRecords.result`` and each record's ``result``
(unanswered records stay ``NO_RESPONSE``); exceptions from ``aerospike.exception`` come from
other failures (closed client, bad arguments) and from queries. Records above ``record_limit``
bytes are refused with ``RECORD_TOO_BIG`` like a server with the default 1 MiB write-block.
The user key is stored only when the write policy asks for ``POLICY_KEY_SEND``, as on a server.
Needs the ``aerospike`` package (for its exception classes and helper types).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aerospike
from aerospike import exception as aero_exc
from aerospike_helpers.batch.records import BatchRecord, BatchRecords, Write

# Result codes: the ``code`` of the matching ``aerospike.exception`` class.
OK = 0
NOT_FOUND = 2  # RecordNotFound
GENERATION = 3  # RecordGenerationError
RECORD_EXISTS = 5  # RecordExistsError
TIMEOUT = 9  # TimeoutError
RECORD_TOO_BIG = 13  # RecordTooBig
NO_RESPONSE = -15  # NoResponse: the record was never answered
BATCH_FAILED = -16  # BatchFailed: one or more records of a batch failed
_RECORD_OVERHEAD = 64  # header and metadata bytes counted against the record limit


def make_error(cls: type[Exception], msg: str) -> Exception:
    """An ``aerospike.exception`` instance shaped like the client's (code, msg, file, line)."""
    code = getattr(cls, "code", -1)
    exc = cls(code, msg, "fake_aerospike", 0, False)
    exc.code, exc.msg, exc.in_doubt = code, msg, False  # type: ignore[attr-defined]
    return exc


@dataclass
class _Record:
    bins: dict[str, Any]
    expires_at_ms: int
    ttl_s: int
    gen: int
    user_key: Any


@dataclass
class FakeAerospikeClient:
    """Records in a dict, expiry on an injectable ms clock; knobs to inject failures."""

    clock_ms: Callable[[], int] = lambda: 0
    record_limit: int = 1 << 20
    records: dict[tuple[str, str, Any], _Record] = field(default_factory=dict)
    #: (method name, first argument) of every call, for round-trip and ordering assertions.
    calls: list[tuple[str, Any]] = field(default_factory=list)
    #: method name -> exception raised by its next call (then forgotten).
    raise_next: dict[str, Exception] = field(default_factory=dict)
    #: method names whose next call times out the way the client reports it (result codes).
    timeout_next: set[str] = field(default_factory=set)
    #: method name -> function run once at its next call, before it answers (interleavings).
    on_call: dict[str, Callable[[], None]] = field(default_factory=dict)
    #: user key -> result code a batch_write or batch_read gives that record (kept until removed).
    record_errors: dict[Any, int] = field(default_factory=dict)
    connected: bool = True

    def _enter(self, method: str, arg: Any) -> None:
        self.calls.append((method, arg))
        if not self.connected:
            raise make_error(aero_exc.ClusterError, "No connection to aerospike cluster")
        if method in self.raise_next:
            raise self.raise_next.pop(method)
        if method in self.on_call:
            self.on_call.pop(method)()

    def _live(self, key: tuple[str, str, Any]) -> _Record | None:
        rec = self.records.get(key)
        if rec is not None and rec.expires_at_ms <= self.clock_ms():
            del self.records[key]
            return None
        return rec

    def _tuple(self, key: tuple[str, str, Any], rec: _Record, bins: list[str] | None) -> tuple:
        ns, set_, pk = key
        out_key = (ns, set_, rec.user_key, aerospike.calc_digest(ns, set_, pk))
        remaining = max(1, -(-(rec.expires_at_ms - self.clock_ms()) // 1000))
        kept = {b: v for b, v in rec.bins.items() if bins is None or b in bins}
        return (out_key, {"ttl": remaining, "gen": rec.gen}, kept)

    # -- the client API the store uses -----------------------------------------------------

    def connect(self, *_args: Any) -> FakeAerospikeClient:
        self.connected = True
        return self

    def is_connected(self) -> bool:
        return self.connected

    def close(self) -> None:
        self.connected = False

    def batch_write(self, batch_records: BatchRecords, policy_batch: dict | None = None) -> Any:
        """Applies each ``Write``; mutates and returns ``batch_records`` like the client."""
        self._enter("batch_write", batch_records)
        timed_out = "batch_write" in self.timeout_next
        self.timeout_next.discard("batch_write")
        failed = False
        for br in batch_records.batch_records:
            if not isinstance(br, Write):
                raise make_error(aero_exc.ParamError, "fake supports Write records only")
            br.result = NO_RESPONSE if timed_out else self._apply(br, policy_batch or {})
            br.in_doubt = timed_out
            br.record = None if br.result != OK else (br.key, None, {})
            failed = failed or br.result != OK
        batch_records.result = TIMEOUT if timed_out else (BATCH_FAILED if failed else OK)
        return batch_records

    def _apply(self, br: Write, policy_batch: dict) -> int:
        ns, set_, pk = br.key[:3]
        if pk in self.record_errors:
            return self.record_errors[pk]
        bins: dict[str, Any] = {}
        for op in br.ops:
            if op.get("op") != aerospike.OPERATOR_WRITE:
                raise make_error(aero_exc.ParamError, f"fake supports write ops only: {op}")
            bins[op["bin"]] = op["val"]
        ttl = (br.meta or {}).get("ttl", (br.policy or {}).get("ttl", policy_batch.get("ttl")))
        if not isinstance(ttl, int) or ttl <= 0:
            raise make_error(aero_exc.ParamError, f"fake needs a positive TTL in s, got {ttl!r}")
        send = (br.policy or policy_batch).get("key") == aerospike.POLICY_KEY_SEND
        size = _RECORD_OVERHEAD + sum(len(b) + _size(v) for b, v in bins.items())
        if size > self.record_limit:
            return RECORD_TOO_BIG
        old = self._live((ns, set_, pk))
        refused = self._guard(br, old)
        if refused:
            return refused
        merged = {**(old.bins if old else {}), **bins}
        expires = self.clock_ms() + ttl * 1000
        self.records[(ns, set_, pk)] = _Record(
            merged, expires, ttl, (old.gen + 1) if old else 1, pk if send else None
        )
        return OK

    @staticmethod
    def _guard(br: Write, old: _Record | None) -> int:
        """The server's generation and existence checks: a result code, or 0 to write.

        ``POLICY_GEN_EQ`` writes only if the record's generation equals ``meta["gen"]`` (a
        missing record fails it too here, the stricter reading); ``POLICY_EXISTS_CREATE`` only
        if the record does not exist."""
        policy = br.policy or {}
        if policy.get("exists") == aerospike.POLICY_EXISTS_CREATE and old is not None:
            return RECORD_EXISTS
        if policy.get("gen") == aerospike.POLICY_GEN_EQ:
            expected = (br.meta or {}).get("gen")
            if old is None or old.gen != expected:
                return GENERATION
        return OK

    def batch_read(
        self, keys: list, bins: list[str] | None = None, policy: dict | None = None
    ) -> Any:
        """A new ``BatchRecords`` of ``BatchRecord`` in key order, like the client."""
        self._enter("batch_read", list(keys))
        timed_out = "batch_read" in self.timeout_next
        self.timeout_next.discard("batch_read")
        out = BatchRecords([BatchRecord(tuple(k)) for k in keys])
        failed = False
        for br in out.batch_records:
            key = tuple(br.key[:3])
            rec = None if timed_out else self._live(key)
            if timed_out:
                br.result = NO_RESPONSE
            elif key[2] in self.record_errors:
                br.result = self.record_errors[key[2]]
            else:
                br.result = OK if rec is not None else NOT_FOUND
            if br.result == OK and rec is not None:
                br.record = self._tuple(key, rec, bins)
            failed = failed or br.result not in (OK, NOT_FOUND)
        out.result = TIMEOUT if timed_out else (BATCH_FAILED if failed else OK)
        return out

    def query(self, namespace: str, set: str | None = None) -> FakeQuery:
        return FakeQuery(self, namespace, set)

    def __len__(self) -> int:
        return len(self.records)


class FakeQuery:
    """A primary-index query (no predicate): every live record of the set."""

    def __init__(self, client: FakeAerospikeClient, namespace: str, set_: str | None) -> None:
        self._client, self._ns, self._set = client, namespace, set_
        self._bins: list[str] | None = None

    def select(self, *bins: str) -> None:
        self._bins = list(bins)

    def results(self, policy: dict | None = None, options: dict | None = None) -> list[tuple]:
        self._client._enter("query.results", (self._ns, self._set))
        if "query" in self._client.timeout_next:  # queries do raise on a timeout
            self._client.timeout_next.discard("query")
            raise make_error(aero_exc.TimeoutError, "Timeout")
        return [
            self._client._tuple(key, rec, self._bins)
            for key in list(self._client.records)
            if key[0] == self._ns
            and (self._set is None or key[1] == self._set)
            and (rec := self._client._live(key)) is not None
        ]

    def foreach(
        self,
        callback: Callable[[tuple], Any],
        policy: dict | None = None,
        options: dict | None = None,
    ) -> None:
        for row in self.results(policy, options):
            if callback(row) is False:
                return


def _size(value: Any) -> int:
    if isinstance(value, bytes | bytearray | str):
        return len(value)
    return 8

"""Malformed and mutated Kafka messages for the live fuzz test (deterministic for a given seed).

Two families, each a list of :class:`FuzzMessage` for the pipeline's input topics:

* **byte mutations** of valid Avro encodings (bit flips, byte sets, inserts, deletes,
  truncations, extensions, splices, header rewrites, pure random bytes, empty and null values)
  and valid records of the *wrong* schema for the topic;
* **hypothesis records near every validation bound** (``schemas/validation.py``,
  ``schemas/limits.py``), encoded without validation: candidate lists at and past
  ``max_candidates``, negative ids, event times at both ends of the accepted range and far in
  the future, NaN/inf vectors, wrong dims and byte lengths, unsorted histories, labels outside
  {0, 1}, mismatched list lengths. Hypothesis runs with ``derandomize=True``: same records every
  run (for one hypothesis version).

What a consumer must do with each message is predicted by :func:`expected_reason`: the
dead-letter reason of the codec's error, or None when it decodes to a valid record (then it is
processed, or dead-lettered later for a reason the codec cannot see: future event time,
processing error).
"""

from __future__ import annotations

import random
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from schemas.codec import Codec
from schemas.errors import SchemaError
from schemas.limits import MAX_EVENT_TIME_MS, MIN_EVENT_TIME_MS, Limits
from schemas.records import (
    DeadLetter,
    EmbeddingBatch,
    ImpressionEvent,
    NeighbourList,
    PairEmbedding,
    PairProposal,
    ProposalBatch,
    RequestEvent,
    UserAggregate,
)
from tests.integration.live_harness import raw_encode

#: the pipeline's input topics and the record type each one carries
TOPIC_TYPES: dict[str, type] = {
    "requests": RequestEvent,
    "impressions": ImpressionEvent,
    "speculated": ProposalBatch,
    "verified": ProposalBatch,
    "embeddings": EmbeddingBatch,
}
#: fuzz users and items start here, far from any test traffic's ids
FUZZ_ID0 = 1_000_000
LIMITS = Limits()
I64 = 2**63 - 1
I32 = 2**31 - 1
DAY_MS = 86_400_000


@dataclass(frozen=True, slots=True)
class FuzzMessage:
    """One message to send: logical topic name, Kafka key and value, and how it was made."""

    topic: str
    key: bytes | None
    value: bytes | None
    kind: str


def expected_reason(codec: Codec, msg: FuzzMessage) -> str | None:
    """The codec's dead-letter reason for ``msg``, or None when it decodes to a valid record."""
    try:
        codec.decode(msg.value, TOPIC_TYPES[msg.topic])
    except SchemaError as exc:
        return exc.reason
    return None


def decoded(codec: Codec, msg: FuzzMessage) -> Any:
    """The record ``msg`` decodes to (only for messages whose expected reason is None)."""
    return codec.decode(msg.value, TOPIC_TYPES[msg.topic])


# --- valid bases -------------------------------------------------------------------------------


def _vectors(rng: random.Random, rows: int, dim: int) -> bytes:
    gen = np.random.default_rng(rng.getrandbits(32))
    return gen.normal(0, 1, rows * dim).astype(np.float16).tobytes()


def valid_base(rng: random.Random, topic: str, t_ms: int, dim: int) -> Any:
    """A valid record for ``topic``: a fuzz user, fuzz items, event time ``t_ms``."""
    user = FUZZ_ID0 + rng.randrange(500)
    rid = f"fz-{rng.getrandbits(32):08x}"
    n = rng.randint(1, 12)
    items = tuple(FUZZ_ID0 + rng.randrange(5_000) for _ in range(n))
    if topic == "requests":
        return RequestEvent(rid, user, t_ms, "feed", items)
    if topic == "impressions":
        return ImpressionEvent(rid, user, items[0], t_ms, rng.randrange(20), rng.randint(0, 1))
    strategies = ("candidates",) * n
    if topic == "speculated":
        return ProposalBatch(rid, user, t_ms, n, items, strategies)
    if topic == "verified":
        h = rng.randint(0, 8)
        scores = tuple(rng.random() for _ in range(n))
        hist = tuple(FUZZ_ID0 + rng.randrange(5_000) for _ in range(h))
        labels = tuple(rng.randint(0, 1) for _ in range(h))
        times = tuple(t_ms - 1000 * (h - k) for k in range(h))
        return ProposalBatch(rid, user, t_ms, n, items, strategies, scores, hist, labels, times)
    return EmbeddingBatch(rid, user, t_ms, "fuzz-v1", "FLOAT16", dim, items, _vectors(rng, n, dim))


def _other_type(rng: random.Random, t_ms: int, dim: int) -> Any:
    """A valid record of a type the topic does not carry (or another topic's type)."""
    user = FUZZ_ID0 + rng.randrange(500)
    vec = _vectors(rng, 1, dim)
    return rng.choice(
        [
            PairProposal("fz", user, FUZZ_ID0, t_ms, "candidates", 0.5),
            PairEmbedding(user, FUZZ_ID0, t_ms, "fuzz-v1", "FLOAT16", dim, vec),
            UserAggregate(user, t_ms, DAY_MS, 3, "fuzz-v1", "FLOAT16", dim, vec),
            NeighbourList(user, t_ms, (FUZZ_ID0 + 1,), (0.9,)),
            DeadLetter("requests", 0, 1, "bad_header", "x", b"1", b"\x01", t_ms),
            valid_base(rng, rng.choice(list(TOPIC_TYPES)), t_ms, dim),
        ]
    )


# --- byte mutations ----------------------------------------------------------------------------

MUTATIONS = ("flip", "set", "insert", "delete", "truncate", "extend", "splice", "header")


def mutate(rng: random.Random, raw: bytes, other: bytes, op: str) -> bytes:
    """Apply one mutation ``op`` to ``raw`` (``other``: a second encoding, for splices)."""
    out = bytearray(raw)
    pos = rng.randrange(len(out)) if out else 0
    if op == "flip" and out:
        out[pos] ^= 1 << rng.randrange(8)
    elif op == "set" and out:
        out[pos] = rng.choice([0x00, 0x01, 0x7F, 0x80, 0xFE, 0xFF, rng.randrange(256)])
    elif op == "insert":
        out[pos:pos] = rng.randbytes(rng.randint(1, 9))
    elif op == "delete":
        del out[pos : pos + rng.randint(1, 8)]
    elif op == "truncate":
        del out[pos:]
    elif op == "extend":
        out += rng.randbytes(rng.randint(1, 64))
    elif op == "splice":
        out = out[:pos] + bytearray(other[pos:])
    elif op == "header" and len(out) >= 5:
        magic = rng.choice([0, 0, 0, 1, 0xFF])
        out[:5] = struct.pack(">BI", magic, rng.choice([0, 1, 2, 7, 8, 9, 10, 999, I32]))
    return bytes(out)


def byte_mutations(
    n: int, seed: int, t_range: tuple[int, int], dim: int, codec: Codec
) -> list[FuzzMessage]:
    """``n`` mutated messages spread over the input topics (1-3 mutations each), plus random
    bytes, empty/null values and valid records of the wrong type."""
    rng = random.Random(seed)
    topics = list(TOPIC_TYPES)
    out: list[FuzzMessage] = []
    for k in range(n):
        topic = topics[k % len(topics)]
        t_ms = rng.randint(*t_range)
        base = valid_base(rng, topic, t_ms, dim)
        key = str(base.user_id).encode()
        roll = rng.random()
        if roll < 0.04:
            value: bytes | None = rng.randbytes(rng.randint(0, 200))
            kind = "random_bytes"
        elif roll < 0.05:
            value, kind = rng.choice([b"", None, b"\x00", b"\x00\x00\x00\x00"]), "empty"
        elif roll < 0.09:
            other = _other_type(rng, t_ms, dim)
            value, kind = codec.encode(other), "wrong_schema"
        else:
            value = codec.encode(base)
            ops = [rng.choice(MUTATIONS) for _ in range(rng.randint(1, 3))]
            other = codec.encode(valid_base(rng, rng.choice(topics), t_ms, dim))
            for op in ops:
                value = mutate(rng, value, other, op)
            kind = "+".join(ops)
        if rng.random() < 0.02:
            key = rng.choice([None, b"", rng.randbytes(8)])
        out.append(FuzzMessage(topic, key, value, kind))
    return out


# --- hypothesis records near every validation bound -------------------------------------------


def near(lo: int, hi: int) -> st.SearchStrategy[int]:
    """Integers in ``[lo, hi]``, mostly at or next to either end."""
    edges = sorted({lo, min(lo + 1, hi), max(hi - 1, lo), hi})
    return st.one_of(st.sampled_from(edges), st.integers(lo, hi))


def _strategies(t_range: tuple[int, int], now_ms: int, dim: int) -> dict[str, Any]:
    users = st.one_of(
        st.integers(FUZZ_ID0, FUZZ_ID0 + 500), st.sampled_from([-1, -(2**63), I64, 0])
    )
    ids = st.one_of(st.integers(FUZZ_ID0, FUZZ_ID0 + 5_000), st.sampled_from([-1, -(2**63), I64]))
    times = st.one_of(
        st.integers(*t_range),
        st.sampled_from(
            [MIN_EVENT_TIME_MS - 1, MIN_EVENT_TIME_MS, MAX_EVENT_TIME_MS - 1, MAX_EVENT_TIME_MS]
        ),
        st.sampled_from([now_ms + 2 * DAY_MS, now_ms + 365 * DAY_MS, 5_000_000_000_000]),
        st.sampled_from([0, -1, -(2**63), I64]),
    )
    # at and past max_string_len (characters), empty, multi-byte
    names = st.sampled_from(["fz", "", "x" * 256, "x" * 257, "\u00e9" * 256, "\U0001f600" * 200])
    counts = near(0, LIMITS.max_candidates + 1)
    item_lists = st.one_of(
        st.lists(ids, max_size=8),
        st.tuples(near(LIMITS.max_candidates - 1, LIMITS.max_candidates + 1), ids).map(
            lambda p: [FUZZ_ID0 + k for k in range(p[0])]
        ),
    )
    floats = st.one_of(
        st.floats(0, 1, width=32), st.sampled_from([float("nan"), float("inf"), -float("inf")])
    )
    labels = st.one_of(st.sampled_from([0, 1]), st.sampled_from([-1, 2, 300, I32, -(2**31)]))
    dims = st.sampled_from([dim, dim, 0, -1, 1, dim + 1, LIMITS.max_dim, LIMITS.max_dim + 1])
    dtypes = st.sampled_from(["FLOAT16", "FLOAT16", "FLOAT32", "float16"])
    values = st.sampled_from([0.5, float("nan"), float("inf"), 65504.0, 1e9])
    return {
        "users": users, "ids": ids, "times": times, "names": names, "counts": counts,
        "item_lists": item_lists, "floats": floats, "labels": labels, "dims": dims,
        "dtypes": dtypes, "values": values,
    }  # fmt: skip


@st.composite
def _history(draw: st.DrawFn, s: dict[str, Any], t: int) -> tuple[Any, Any, Any]:
    h = draw(st.integers(0, 6))
    items = tuple(draw(st.lists(s["ids"], min_size=h, max_size=h)))
    labels = tuple(draw(st.lists(s["labels"], min_size=h, max_size=h)))
    order = draw(st.sampled_from(["sorted", "unsorted", "equal", "future", "short"]))
    times = [t - 1000 * (h - k) for k in range(h)]
    if order == "unsorted" and h >= 2:
        times[0], times[-1] = times[-1], times[0]
    elif order == "equal" and h >= 2:
        times[1] = times[0]
    elif order == "future" and h:
        times[-1] = t + 1
    elif order == "short" and h:
        times = times[:-1]
    return items, labels, tuple(times)


@st.composite
def bound_record(draw: st.DrawFn, topic: str, s: dict[str, Any]) -> Any:
    """A record for ``topic`` whose fields sit at, inside or just past a validation bound."""
    user, t, rid = draw(s["users"]), draw(s["times"]), draw(s["names"])
    if topic == "requests":
        return RequestEvent(rid, user, t, draw(s["names"]), tuple(draw(s["item_lists"])))
    if topic == "impressions":
        pos = draw(near(-1, 1))
        return ImpressionEvent(rid, user, draw(s["ids"]), t, pos, draw(s["labels"]))
    if topic in ("speculated", "verified"):
        items = tuple(draw(s["item_lists"]))
        n = len(items) + draw(st.sampled_from([0, 0, 0, 1, -1]))
        strategies = ("candidates",) * max(n, 0)
        scores: tuple[float, ...] = ()
        hist: tuple[Any, Any, Any] = ((), (), ())
        if topic == "verified":  # one drawn score (cheap at 1,000 items), maybe a bad one first
            score, first = draw(st.floats(0, 1, width=32)), draw(s["floats"])
            scores = (first, *[score] * (len(items) - 1))[: len(items)]
            hist = draw(_history(s, t))
        return ProposalBatch(rid, user, t, draw(s["counts"]), items, strategies, scores, *hist)
    items = tuple(draw(st.lists(s["ids"], max_size=6)))
    dim, dtype = draw(s["dims"]), draw(s["dtypes"])
    rows = len(items) + draw(st.sampled_from([0, 0, 0, 1, -1]))
    vec = np.full(max(rows, 0) * max(dim, 0), draw(s["values"]), np.float32)
    with np.errstate(over="ignore"):  # 1e9 becomes inf in float16, on purpose
        data = vec.astype(np.float32 if dtype == "FLOAT32" else np.float16).tobytes()
    version = draw(st.sampled_from(["fuzz-v1", "", "v" * 300]))
    return EmbeddingBatch(rid, user, t, version, dtype, dim, items, data)


def bound_records(n: int, t_range: tuple[int, int], now_ms: int, dim: int) -> list[FuzzMessage]:
    """``n`` hypothesis-generated records near the bounds, encoded without validation."""
    strategies = _strategies(t_range, now_ms, dim)
    out: list[FuzzMessage] = []
    topic_records = st.sampled_from(list(TOPIC_TYPES)).flatmap(
        lambda topic: st.tuples(st.just(topic), bound_record(topic, strategies))
    )

    @settings(
        max_examples=n,
        derandomize=True,
        database=None,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(topic_records)
    def collect(pair: tuple[str, Any]) -> None:
        topic, rec = pair
        try:
            value = raw_encode(rec)
        except (ValueError, TypeError, OverflowError):  # not even Avro can carry it
            return
        out.append(FuzzMessage(topic, str(rec.user_id).encode(), value, "bound"))

    collect()
    return out


def counts_by(items: Iterable[str]) -> dict[str, int]:
    """How many of each string, most frequent first."""
    counts: dict[str, int] = {}
    for item in items:
        counts[item] = counts.get(item, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))

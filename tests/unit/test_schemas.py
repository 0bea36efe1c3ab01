"""Codec round trips, validation errors that name the field, and avsc <-> record agreement."""

from __future__ import annotations

import dataclasses
import math
import struct

import numpy as np
import pytest

from schemas.codec import Codec
from schemas.errors import BadHeader, DecodeError, InvalidField, UnknownSchema, WrongRecordType
from schemas.limits import Limits
from schemas.records import (
    DeadLetter,
    ImpressionEvent,
    NeighbourList,
    PairEmbedding,
    PairProposal,
    RequestEvent,
    UserAggregate,
)
from schemas.registry import ENTRIES, load_schema_json, wire_id_of
from schemas.validation import all_finite, all_non_negative
from schemas.vectors import VectorDtype, VectorSizeError, from_bytes

T0 = 1_700_000_000_000
codec = Codec()

SAMPLES = [
    RequestEvent("r1", 7, T0, "feed", (1, 2, 3)),
    ImpressionEvent("r1", 7, 2, T0, 1, 1),
    PairProposal("r1", 7, 2, T0, "candidates", None),
    PairProposal("r1", 7, 2, T0, "candidates", 0.75),
    PairEmbedding.from_array(7, 2, T0, "fm-1", np.arange(64, dtype=np.float32) / 64),
    UserAggregate.from_array(
        7, T0, 86_400_000, 4, "fm-1", np.ones(16, np.float32), VectorDtype.FLOAT32
    ),
    NeighbourList(7, T0, (8, 9), (0.5, 0.25)),
    DeadLetter("solaris.requests", 0, 12, "decode_error", "boom", b"k", b"\x00\x01", T0),
]


@pytest.mark.parametrize("record", SAMPLES, ids=lambda r: type(r).__name__)
def test_round_trip(record: object) -> None:
    assert codec.decode(codec.encode(record)) == record


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e.record_type.__name__)
def test_avsc_fields_match_record_fields(entry) -> None:
    """The newest schema of a record has exactly its fields; an older one a prefix of them
    (later versions only add fields with defaults, so old messages still decode)."""
    avsc = [f["name"] for f in load_schema_json(entry.filename)["fields"]]
    fields = [f.name for f in dataclasses.fields(entry.record_type)]
    if entry.wire_id == wire_id_of(entry.record_type):
        assert avsc == fields
    else:
        assert avsc == fields[: len(avsc)]
        added = load_schema_json(
            next(e.filename for e in ENTRIES if e.wire_id == wire_id_of(entry.record_type))
        )["fields"][len(avsc) :]
        assert all("default" in f for f in added)


def test_expect_rejects_other_record_type() -> None:
    data = codec.encode(SAMPLES[0])
    with pytest.raises(WrongRecordType, match="expected ImpressionEvent"):
        codec.decode(data, ImpressionEvent)


@pytest.mark.parametrize(
    ("data", "error"),
    [
        (b"", BadHeader),
        (b"\x00\x00", BadHeader),
        (b"\x07\x00\x00\x00\x01abc", BadHeader),
        (struct.pack(">BI", 0, 999) + b"x", UnknownSchema),
        (struct.pack(">BI", 0, 1) + b"\xff\xff\xff", DecodeError),
    ],
)
def test_bad_bytes_raise_clear_errors(data: bytes, error: type) -> None:
    with pytest.raises(error):
        codec.decode(data)


def test_trailing_bytes_are_rejected() -> None:
    with pytest.raises(DecodeError, match="trailing"):
        codec.decode(codec.encode(SAMPLES[1]) + b"\x00")


@pytest.mark.parametrize(
    ("record", "field"),
    [
        (RequestEvent("r", 1, T0, "feed", tuple(range(11))), "candidates"),
        (RequestEvent("", 1, T0, "feed", ()), "request_id"),
        (RequestEvent("r", -1, T0, "feed", ()), "user_id"),
        (RequestEvent("r", 1, 5, "feed", ()), "event_time_ms"),
        (ImpressionEvent("r", 1, 2, T0, 0, 2), "label"),
        (ImpressionEvent("r", 1, 2, T0, -1, 0), "position"),
        (PairProposal("r", 1, 2, T0, "c", float("nan")), "score"),
        (NeighbourList(1, T0, (2, 3), (0.1,)), "weights"),
        (NeighbourList(1, T0, (2,), (float("inf"),)), "weights"),
        (NeighbourList(1, T0, (2, 3, 4), (0.1, float("nan"), 0.2)), "weights"),
        (RequestEvent("r", 1, T0, "feed", (3, -1, 4)), "candidates"),
    ],
)
def test_invalid_fields_are_named(record: object, field: str) -> None:
    small = Codec(Limits(max_candidates=10))
    with pytest.raises(InvalidField) as err:
        small.encode(record)
    assert err.value.field == field
    assert field in str(err.value)


def test_nan_vector_rejected_on_decode() -> None:
    good = PairEmbedding.from_array(1, 2, T0, "v", np.zeros(4, np.float32))
    bad = dataclasses.replace(good, vector=np.array([0, np.nan, 0, 0], "<f2").tobytes())
    # Build the bytes with a permissive path: encode the good record, then splice the NaN vector.
    data = codec.encode(good).replace(good.vector, bad.vector)
    with pytest.raises(InvalidField, match="NaN"):
        codec.decode(data)


def test_vector_dim_mismatch_rejected() -> None:
    rec = dataclasses.replace(
        PairEmbedding.from_array(1, 2, T0, "v", np.zeros(4, np.float32)), dim=5
    )
    with pytest.raises(InvalidField, match="vector"):
        codec.encode(rec)
    with pytest.raises(VectorSizeError):
        from_bytes(b"\x00" * 6, VectorDtype.FLOAT16, 4)


def test_float16_round_trip_precision() -> None:
    vec = np.random.default_rng(0).normal(size=64).astype(np.float32)
    rec = PairEmbedding.from_array(1, 2, T0, "v", vec)
    np.testing.assert_allclose(rec.array(), vec, rtol=1e-3, atol=1e-3)
    assert len(rec.vector) == 128


def test_batches_round_trip_and_split_into_pairs() -> None:
    from schemas.records import EmbeddingBatch, ProposalBatch

    prop = ProposalBatch(
        "r", 1, T0, 3, (4, 5), ("candidates", "lookahead"), (0.5, 0.25), (9,), (1,), (T0 - 5,)
    )
    assert codec.decode(codec.encode(prop)) == prop
    vecs = np.arange(8, dtype=np.float32).reshape(2, 4)
    batch = EmbeddingBatch("r", 1, T0, "fm", "FLOAT16", 4, (4, 5), vecs.astype("<f2").tobytes())
    assert codec.decode(codec.encode(batch)) == batch
    pairs = batch.pairs()
    assert [p.item_id for p in pairs] == [4, 5]
    np.testing.assert_array_equal(pairs[1].array(), vecs[1])
    np.testing.assert_array_equal(batch.arrays(), vecs)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"scores": (float("nan"), 0.1)}, "scores"),
        ({"scores": (0.1, float("-inf"))}, "scores"),
        ({"strategies": ("c",)}, "strategies"),
        ({"history_times_ms": (T0,)}, "history_times_ms"),
        (
            {
                "history_items": (3, 4),
                "history_labels": (0, 1),
                "history_times_ms": (T0 + 1, T0 - 1),
            },
            "history_times_ms",
        ),
        ({"history_labels": ()}, "history_labels"),
        ({"item_ids": (1, -2)}, "item_ids"),
        ({"prior_counts": (0.5, float("nan")), "pair_counts": (0, 1)}, "prior_counts"),
        ({"prior_counts": (float("inf"), 0.0), "pair_counts": (0, 1)}, "prior_counts"),
        ({"prior_counts": (0.5, -0.5), "pair_counts": (0, 1)}, "prior_counts"),
        ({"prior_counts": (0.5, 1.0), "pair_counts": (-1, 1)}, "pair_counts"),
    ],
)
def test_proposal_batch_rules(kwargs: dict, field: str) -> None:
    from schemas.records import ProposalBatch

    base = {
        "request_id": "r",
        "user_id": 1,
        "event_time_ms": T0,
        "candidates": 2,
        "item_ids": (1, 2),
        "strategies": ("c", "c"),
        "scores": (),
        "history_items": (3,),
        "history_labels": (0,),
        "history_times_ms": (T0 - 1,),
    }
    base.update(kwargs)
    with pytest.raises(InvalidField) as err:
        codec.encode(ProposalBatch(**base))
    assert err.value.field == field


def test_a_proposal_batch_of_schema_v1_still_decodes_without_recurrence_inputs() -> None:
    """Messages written before the recurrence inputs (wire id 8) decode with empty inputs, so a
    rolling upgrade's old speculate agents keep feeding new verify agents."""
    import io

    import fastavro

    from schemas.records import ProposalBatch
    from schemas.registry import parsed_schemas

    old = ProposalBatch("r1", 7, T0, 3, (1, 2), ("recent", "recent"))
    buf = io.BytesIO()
    buf.write(struct.pack(">BI", 0, 8))
    body = {
        f["name"]: getattr(old, f["name"])
        for f in load_schema_json("proposal_batch.avsc")["fields"]
    }
    fastavro.schemaless_writer(buf, parsed_schemas()[8], body)
    got = Codec().decode(buf.getvalue(), ProposalBatch)
    assert got == old and got.prior_counts == () and got.pair_counts == ()
    assert Codec().encode(old)[1:5] == struct.pack(">I", 10)  # new messages are written as v2


def test_the_fast_finiteness_check_equals_the_check_of_each_value() -> None:
    """``all_finite`` decides by one ``sum`` where it can; it must agree with checking each
    value, wherever the NaN or infinity sits and when finite values overflow the sum."""
    nan, inf = float("nan"), float("inf")
    cases = [
        (),
        (0.0,),
        (1.0, 2.5, -3.0),
        (1e308, 1e308),  # finite, but their sum overflows
        (-1e308, -1e308, 5.0),
        (nan,),
        (1.0, nan),
        (inf, -inf),
        (1e308, 1e308, nan),
        (-inf, 1.0),
        (1, 2, 3),
    ]
    for values in cases:
        want = all(math.isfinite(v) for v in values)
        assert all_finite(values) is want, values
    assert all_non_negative(()) and all_non_negative((0, 3)) and all_non_negative((0.0, 2.5))
    assert not all_non_negative((3, -1)) and not all_non_negative((-0.5,))

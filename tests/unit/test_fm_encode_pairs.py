"""Bulk encoding of the FM's pair values is byte-identical to encoding them one by one."""

from __future__ import annotations

import numpy as np

from schemas.records import PairEmbedding
from store.values import decode_vector, encode_pair, encode_pairs


def test_bulk_encode_equals_one_by_one_across_versions_and_dtypes() -> None:
    rng = np.random.default_rng(0)
    recs = []
    for j in range(50):
        dtype = "FLOAT16" if j % 7 else "FLOAT32"
        vec = rng.standard_normal(8).astype(np.float16 if dtype == "FLOAT16" else np.float32)
        version = "fm-a" if j < 30 else "fm-b"
        recs.append(
            PairEmbedding(j, 10 * j, 1_700_000_000_000 + j, version, dtype, 8, vec.tobytes())
        )
    got = encode_pairs(recs)
    assert got == [encode_pair(r) for r in recs]
    assert [decode_vector(v).event_time_ms for v in got] == [r.event_time_ms for r in recs]
    assert encode_pairs([]) == []

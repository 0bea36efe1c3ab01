"""The candidates' mean item vector, for a whole batch of requests at once
(UserRepresentations.of_items_many): each row is what the list alone gives, bit for bit, so
the simulator (batches of one) and the live agent (batches of many) build the same
representations."""

from __future__ import annotations

import numpy as np

from schemas.records import RequestEvent
from streams.engine.neighbours import UserRepresentations
from streams.engine.steps.speculate import speculate_step
from streams.models_loader import BundleItemVectors
from tests.unit.test_engine_undo import HORIZON_MS, _requests, _stages
from tests.unit.test_speculate_step import Stored


def _reps(tmp_path) -> UserRepresentations:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(7)
    path = tmp_path / "items.npz"
    ids = np.arange(0, 400, 2, dtype=np.int64)  # odd ids are unknown: zero vectors
    np.savez(path, ids=ids, vectors=rng.normal(size=(len(ids), 16)).astype(np.float32))
    return UserRepresentations(BundleItemVectors(path))


def test_each_row_is_its_list_alone_whatever_the_batch(tmp_path) -> None:  # type: ignore[no-untyped-def]
    reps = _reps(tmp_path)
    rng = np.random.default_rng(8)
    lists = [tuple(int(x) for x in rng.integers(0, 420, rng.integers(1, 60))) for _ in range(40)]
    lists[5] = ()
    lists[9] = (1, 3, 5)  # every item unknown
    many = reps.of_items_many(lists)
    assert many.shape == (40, 16) and many.dtype == np.float32
    for i, ids in enumerate(lists):
        np.testing.assert_array_equal(many[i], reps.of_items(ids))
        np.testing.assert_array_equal(many[i], reps.of_items_many([(2,), ids])[1])
    assert not many[5].any()
    for i in (0, 9, 20):
        assert np.isclose(np.linalg.norm(many[i]), 1.0)
        known = reps.items.lookup(np.asarray(lists[i], np.int64))
        centred = known.mean(axis=0) - reps.items.mean
        np.testing.assert_allclose(many[i], centred / np.linalg.norm(centred), rtol=1e-5)


def test_a_request_whose_candidates_cannot_be_looked_up_is_refused_alone() -> None:
    """The batch's means cannot be computed; each request then computes its own inside its
    isolation: the others' representations are exactly those of a clean batch."""
    requests = _requests()[:10]
    bad = RequestEvent("bad", requests[0].user_id, requests[3].event_time_ms, "feed", (2**70,))
    clean, clean_stored = _stages(), Stored()
    want = speculate_step(requests, clean_stored.inputs(), clean, HORIZON_MS)
    stages, stored = _stages(), Stored()
    got = speculate_step(
        [*requests[:4], bad, *requests[4:]], stored.inputs(), stages, HORIZON_MS, (Exception,)
    )
    assert [i for i, _ in got.refused] == [4]
    assert got.reps == want.reps

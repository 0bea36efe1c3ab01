"""Issue 24: the neighbour state stays bounded and survives a model upgrade (items 4 and 5)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from schemas.records import RequestEvent
from streams.engine.neighbours import UserRepresentations, fresh_users
from streams.engine.steps.speculate import SavedRep, observe_representation
from tests.unit.test_neighbour_similarity import SharedDirectionItems

#: the neighbour horizon the drivers pass (Settings.neighbour_aggregate_ttl_ms default)
HORIZON = 7 * 24 * 3_600_000


def test_memory_follows_the_active_users_not_every_user_ever_seen() -> None:
    """Refreshes forget aggregates and representations past the horizon."""
    reps = UserRepresentations(SharedDirectionItems())
    for u, t in ((1, 0), (2, 5_000), (3, 9_000)):
        reps.observe(u, [1, 2], t)
    newest = {1: 0, 2: 5_000, 3: 9_000}
    assert fresh_users(newest, reps, 10_000, 5_000) == [2, 3]
    assert newest == {2: 5_000, 3: 9_000} and not reps.has(1) and reps.has(2)


def test_a_saved_representation_of_another_dimension_starts_afresh() -> None:
    """After a model upgrade that changes the item-vector dimension, a returning user's saved
    representation is dropped instead of failing every later request of that user."""
    items = SharedDirectionItems()
    reps = UserRepresentations(items)
    old = SavedRep([0.5] * (items.dim + 3), 1_000)
    new = observe_representation(reps, RequestEvent("r", 7, 2_000, "feed", (1, 2)), old, HORIZON)
    assert new is not None and len(new.vector) == items.dim and new.seen_at_ms == 2_000
    assert reps.vector(7).shape == (items.dim,)
    assert not reps.set(8, [0.1] * (items.dim - 1), 1_000) and not reps.has(8)


def test_the_exact_search_works_in_blocks_with_the_answers_of_one_product(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A refresh queries every active user against every indexed one: the similarities are
    computed a block of rows at a time (bounded memory), and each row's neighbours are those of
    a single matrix product, its weights too up to float32 rounding (BLAS may sum in another
    order for another block shape; both drivers query the same blocks)."""
    import numpy as np

    from streams.engine import neighbours as nb
    from streams.engine.config import ENGINE_DEFAULTS
    from tests.fakes import FakeItems

    reps = UserRepresentations(FakeItems(dim=8))
    rng = np.random.default_rng(3)
    for u in range(120):
        reps.observe(u, rng.integers(0, 60, size=8).tolist(), 1_000)
    users = list(range(120))
    config = replace(ENGINE_DEFAULTS.neighbours, k=6, exact_max=10_000)
    index = nb.NeighbourIndex(users, reps.get(users), reps, config)
    whole = index.query(reps.get(users), 6, users)
    shapes: list[tuple[int, ...]] = []
    real = np.argpartition

    def watched(a: np.ndarray, *args: object, **kw: object) -> np.ndarray:
        shapes.append(a.shape)
        return real(a, *args, **kw)  # type: ignore[call-overload,no-any-return]

    monkeypatch.setattr(nb, "EXACT_BLOCK_FLOATS", 7 * 120)  # 7 query rows per block
    monkeypatch.setattr(nb.np, "argpartition", watched)
    blocked = index.query(reps.get(users), 6, users)
    assert shapes and max(s[0] for s in shapes) == 7 and len(shapes) == -(-120 // 7)
    for (ids_w, w_w), (ids_b, w_b) in zip(whole, blocked, strict=True):
        assert ids_w.tolist() == ids_b.tolist()
        np.testing.assert_allclose(w_b, w_w, rtol=1e-6)

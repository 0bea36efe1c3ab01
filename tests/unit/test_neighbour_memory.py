"""Issue 24: the neighbour state stays bounded and survives a model upgrade (items 4 and 5)."""

from __future__ import annotations

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

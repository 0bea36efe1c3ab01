"""One poison message in an FM micro-batch is isolated; the rest of the batch is embedded."""

from __future__ import annotations

import asyncio

import pytest

from schemas.records import PairEmbedding, ProposalBatch
from streams.engine.steps.embed import EmbedInput, embed_input, embed_isolating

T0 = 1_704_067_200_000


def batch(user: int, times: tuple[int, ...] = (T0 - 2, T0 - 1), labels=(0, 1)) -> ProposalBatch:
    return ProposalBatch(
        f"r{user}", user, T0, 3, (10, 11), ("c", "c"), (0.5, 0.4), (1, 2), labels, times
    )


def fake_embed(poison_user: int | None = None):
    calls: list[int] = []

    async def embed(items: list[EmbedInput[int]]) -> list[PairEmbedding]:
        pairs = [p for it in items for p in it.pairs]
        calls.append(len(pairs))
        if any(p.user_id == poison_user for p in pairs):
            raise RuntimeError("the FM rejected this input")
        return [
            PairEmbedding(p.user_id, p.item_id, p.event_time_ms, "v", "FLOAT16", 1, b"\0\0")
            for p in pairs
        ]

    return embed, calls


def test_valid_batch_is_one_fm_call() -> None:
    embed, calls = fake_embed()
    items = [embed_input(u, batch(u)) for u in range(5)]
    out = asyncio.run(embed_isolating(items, embed))
    assert calls == [10] and not out.failed
    assert [(it.event, len(e)) for it, e in out.done] == [(u, 2) for u in range(5)]


def test_a_failing_message_is_isolated_and_the_rest_embedded() -> None:
    embed, calls = fake_embed(poison_user=3)
    items = [embed_input(u, batch(u)) for u in range(6)]
    out = asyncio.run(embed_isolating(items, embed))
    assert [it.event for it, _ in out.failed] == [3]
    assert sorted(it.event for it, _ in out.done) == [0, 1, 2, 4, 5]
    assert calls == [12, 2, 2, 2, 2, 2, 2] and out.fm_calls == 7


def test_infrastructure_errors_propagate() -> None:
    class Down(Exception):
        pass

    async def embed(items):  # type: ignore[no-untyped-def]
        raise Down("broker gone")

    with pytest.raises(Down):
        asyncio.run(embed_isolating([embed_input(1, batch(1))], embed, (Down,)))


@pytest.mark.parametrize(
    ("bad", "text"),
    [
        (batch(1, times=(T0 - 1, T0 - 2)), "bad history"),  # history not oldest first
        (batch(1, labels=(0, 300)), "labels must be 0 or 1"),  # label outside {0, 1}
    ],
)
def test_embed_input_rejects_broken_preconditions(bad: ProposalBatch, text: str) -> None:
    """One error type for data the step cannot process (the agents dead-letter it alone)."""
    from streams.engine.errors import StepError

    with pytest.raises(StepError, match=text):
        embed_input(0, bad)


def test_chunk_by_pairs_caps_pairs_and_never_splits_a_message() -> None:
    from streams.engine.steps.embed import chunk_by_pairs

    items = [embed_input(u, batch(u)) for u in range(7)]  # 2 pairs each
    groups = chunk_by_pairs(items, 5)
    assert [[it.event for it in g] for g in groups] == [[0, 1], [2, 3], [4, 5], [6]]
    assert chunk_by_pairs(items, 1) == [[it] for it in items]  # larger than the cap: alone
    assert chunk_by_pairs(items, 100) == [items]
    assert chunk_by_pairs([], 5) == []

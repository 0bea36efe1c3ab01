"""RedisStore's packed MGET: the PairGrid fast path sends exactly the keys of ``keys_for``."""

from __future__ import annotations

import pytest

from store.keys import KeyLayout, PairGrid
from store.protocol import ReadBatch
from store.redis_pool import pack_headed_keys, pack_keys, pack_mget
from store.redis_store import RedisStore


def _store(prefix: str) -> RedisStore:
    return RedisStore("redis://127.0.0.1:1/0", KeyLayout(prefix))  # never connects here


@pytest.mark.parametrize(
    "items",
    [
        [1_000_001, 2_345_678, 9_999_999],  # one length: one join
        [1, 22, 333, 4_444, 5, 66],  # mixed lengths: per key
        [7],
        [],
    ],
)
@pytest.mark.parametrize("prefix", ["sol", "bench-é"])  # a non-ASCII prefix: byte lengths
def test_headed_keys_match_keys_built_one_by_one(items: list[int], prefix: str) -> None:
    lay = KeyLayout(prefix)
    assert pack_headed_keys(lay.pair_head(3), items) == pack_keys(lay.pairs(3, items))


def test_pack_mget_is_resp() -> None:
    assert pack_mget([b"a", b"bc"]) == b"*3\r\n$4\r\nMGET\r\n$1\r\na\r\n$2\r\nbc\r\n"


@pytest.mark.parametrize(
    ("users", "items"), [((5,), [10, 200, 3_000]), ((1, 22, 333), [4, 55]), ((9,), [])]
)
def test_grid_batch_packs_like_a_tuple_batch(users: tuple[int, ...], items: list[int]) -> None:
    s = _store("p")
    grid = ReadBatch(pairs=PairGrid(users, items), aggregates=(users[0],), neighbours=(7,))
    tuples = ReadBatch(pairs=list(grid.pairs), aggregates=[users[0]], neighbours=[7])
    assert s.keys_for(grid) == s.keys_for(tuples)
    assert s._pack(grid) == s._pack(tuples) == pack_keys(s.keys_for(tuples))
    s.close()


def test_pair_grid_is_a_user_major_sequence_of_pairs() -> None:
    grid = PairGrid([1, 2], [10, 20, 30])
    want = [(1, 10), (1, 20), (1, 30), (2, 10), (2, 20), (2, 30)]
    assert len(grid) == 6 and list(grid) == want
    assert [grid[i] for i in range(-6, 6)] == want + want
    assert grid[1:4] == want[1:4]
    with pytest.raises(IndexError):
        grid[6]
    assert len(PairGrid([1], [])) == 0 and list(PairGrid([], [1])) == []

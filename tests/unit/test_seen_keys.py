"""The aggregate state's counted keys, kept per bucket (:class:`streams.engine.aggregator.SeenKeys`):
the same answers as one set, values written before the change still read, and a batch that
adds to one bucket leaves the others' stored text as it was."""

from __future__ import annotations

import base64
import json

import numpy as np

from schemas.records import PairEmbedding
from streams.engine.aggregator import AggregateState, RollingAggregator, SeenKeys
from streams.engine.state import AGGREGATES, aggregate_confirmed

T0 = 1_704_067_200_000  # a bucket boundary
H = 3_600_000


def _emb(item: int, t: int) -> PairEmbedding:
    return PairEmbedding.from_array(1, item, t, "fm", np.full(4, item, np.float32))


def _through_json(value: object) -> object:
    return json.loads(json.dumps(value))


def test_membership_equals_a_plain_set_of_the_same_keys() -> None:
    """Keys at a bucket's first millisecond and its last, in buckets absent from the state and
    before every bucket: each answer is the plain set's."""
    rng = np.random.default_rng(5)
    starts = [T0 + H * k for k in (0, 1, 3, 4, 7)]
    keys = set()
    for start in starts:
        for t in (start, start + H - 1, *(start + rng.integers(0, H, 20))):
            keys.add((int(rng.integers(0, 30)), int(t)))
    seen = SeenKeys.of(keys, starts)
    assert seen == keys and len(seen) == len(keys)
    probes = [(i, t) for i in range(30) for t in {t for _, t in keys}]
    probes += [(1, T0 - 1), (1, T0 + 2 * H), (1, T0 + 5 * H + 7), (2, T0 + 99 * H)]
    assert [p in seen for p in probes] == [p in keys for p in probes]
    back = SeenKeys({s: seen.encoded(s) for s in seen.starts()})
    assert [p in back for p in probes] == [p in keys for p in probes]


def _legacy(state: AggregateState) -> dict[str, object]:
    """The table value as written before the keys were kept per bucket: one list ``"s"``."""
    value = state.to_json()
    buckets = value["b"]
    assert isinstance(buckets, dict)
    return {
        "b": {k: v[:2] for k, v in buckets.items()},
        "n": value["n"],
        "s": [list(key) for key in state.seen],
        "v": value["v"],
        "r": value["r"],
    }


def test_a_value_written_before_the_change_reads_as_the_same_state() -> None:
    agg = RollingAggregator(24 * H, H)
    state = AggregateState()
    for n in range(12):
        agg.add(state, [_emb(n, T0 + n * 25 * 60_000)])
    old = _through_json(_legacy(state))
    back = AGGREGATES.load(old)
    assert back.seen == state.seen and back.newest_ms == state.newest_ms
    assert back.buckets.keys() == state.buckets.keys()
    assert _through_json(AGGREGATES.dump(back)) == _through_json(AGGREGATES.dump(state))
    confirmed = aggregate_confirmed(old)
    assert all(key in confirmed for key in state.seen)
    assert (3, T0) not in confirmed and (0, T0) in confirmed
    again = agg.add(back, [_emb(0, T0)])  # a redelivery after the upgrade: not counted twice
    assert again is None


def test_an_add_to_one_bucket_leaves_the_other_buckets_text_as_read() -> None:
    """What saves the CPU: only the changed bucket's keys are decoded and encoded again."""
    agg = RollingAggregator(24 * H, H)
    state = AggregateState()
    for n in range(6):
        agg.add(state, [_emb(n, T0 + n * H), _emb(n + 10, T0 + n * H + 5)])
    value = _through_json(AGGREGATES.dump(state))
    assert isinstance(value, dict)
    first = str(T0)
    reversed_keys = np.array([[10, T0 + 5], [0, T0]], "<i8")  # unsorted: as another writer may
    value["b"][first][2] = base64.b64encode(reversed_keys.tobytes()).decode()
    read = AGGREGATES.load(value)
    agg.add(read, [_emb(99, T0 + 5 * H + 9)])  # the newest bucket
    saved = AGGREGATES.dump(read)
    assert saved["b"][first][2] == value["b"][first][2]  # untouched: not decoded, not rewritten
    newest = str(T0 + 5 * H)
    assert saved["b"][newest][2] != value["b"][newest][2]
    assert (99, T0 + 5 * H + 9) in AGGREGATES.load(_through_json(saved)).seen

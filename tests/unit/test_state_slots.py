"""The state key's two slots (store.state_slots): the write rule and the split, pure logic."""

from __future__ import annotations

import numpy as np

from schemas.vectors import VectorDtype
from store.state_slots import merge_state, split_states
from store.values import decode_vector, encode_state, pair_value_length

T0 = 1_700_000_000_000
TTL = 1_000


def state(t: int, x: float, version: str = "fm", width: int = 6) -> bytes:
    return encode_state(t, version, np.full(width, x, np.float32), VectorDtype.FLOAT16)


def times(raw: bytes) -> list[int]:
    return [decode_vector(v).event_time_ms for v in split_states(raw)]


def test_a_newer_state_keeps_the_old_newest_as_previous() -> None:
    one = merge_state(None, state(T0, 1.0), TTL)
    assert one is not None and times(one) == [T0]
    two = merge_state(one, state(T0 + 5, 2.0), TTL)
    assert two is not None and times(two) == [T0 + 5, T0]
    three = merge_state(two, state(T0 + 9, 3.0), TTL)
    assert three is not None and times(three) == [T0 + 9, T0 + 5]  # the oldest drops out


def test_a_previous_state_older_than_the_ttl_is_dropped() -> None:
    """Never served beside the new one, and dropping it keeps the stored bytes a function of
    event times only (the simulator's store expires by event time, Redis by wall time)."""
    one = merge_state(None, state(T0, 1.0), TTL)
    assert times(merge_state(one, state(T0 + TTL, 2.0), TTL) or b"") == [T0 + TTL, T0]
    assert times(merge_state(one, state(T0 + TTL + 1, 2.0), TTL) or b"") == [T0 + TTL + 1]


def test_a_redelivery_replaces_the_newest_and_keeps_the_previous() -> None:
    two = merge_state(merge_state(None, state(T0, 1.0), TTL), state(T0 + 5, 2.0), TTL)
    again = merge_state(two, state(T0 + 5, 7.0), TTL)
    assert again is not None and times(again) == [T0 + 5, T0]
    assert decode_vector(split_states(again)[0]).array()[0] == 7.0


def test_an_older_state_is_skipped() -> None:
    two = merge_state(merge_state(None, state(T0, 1.0), TTL), state(T0 + 5, 2.0), TTL)
    assert merge_state(two, state(T0 + 1, 3.0), TTL) is None


def test_another_model_or_width_starts_over() -> None:
    two = merge_state(merge_state(None, state(T0, 1.0), TTL), state(T0 + 5, 2.0), TTL)
    other = merge_state(two, state(T0 + 1, 3.0, version="fm-2"), TTL)
    assert other is not None and times(other) == [T0 + 1]
    wider = merge_state(two, state(T0 + 9, 3.0, width=8), TTL)
    assert wider is not None and times(wider) == [T0 + 9]


def test_split_leaves_a_single_or_corrupt_value_whole() -> None:
    one = state(T0, 1.0)
    assert split_states(one) == [one]
    assert pair_value_length(one) == len(one)
    assert split_states(one + one[:-1]) == [one + one[:-1]]  # not two whole values
    assert split_states(b"\x00" * 3) == [b"\x00" * 3]
    assert pair_value_length(b"\xff" * 40) is None

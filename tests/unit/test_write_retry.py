"""Issue 24, item 8: store writes retry what another try can cure, never a refusal."""

from __future__ import annotations

import asyncio

import pytest

from store.errors import StoreRefused, StoreTimeout, StoreUnavailable
from streams.live.batch_guard import INFRA_ERRORS
from streams.live.retry import write_with_retry


def test_unreachable_or_slow_store_is_retried_until_it_answers() -> None:
    calls: list[int] = []

    def write() -> str:
        calls.append(1)
        if len(calls) == 1:
            raise StoreUnavailable("connection refused")
        if len(calls) == 2:
            raise StoreTimeout("timed out")
        return "ok"

    assert asyncio.run(write_with_retry("write_pairs", write, max_wait_s=0.01)) == "ok"
    assert len(calls) == 3


def test_a_refused_write_is_not_retried_in_place() -> None:
    calls: list[int] = []

    def write() -> None:
        calls.append(1)
        raise StoreRefused("NOPERM this user has no permissions to access one of the keys")

    with pytest.raises(StoreRefused):
        asyncio.run(write_with_retry("write_pairs", write, max_wait_s=0.01))
    assert calls == [1]
    assert issubclass(StoreRefused, INFRA_ERRORS)  # the batch guard reruns the batch, bounded

"""The simulator's scheduling hook: work applied late, in finishing order, per-user order kept,
and everything still queued applied when the stream ends."""

from __future__ import annotations

from schemas.records import ImpressionEvent, RequestEvent
from streams.simulate.latency import ConstantDelay, DelayedPipeline

T0 = 1_704_067_200_000


def _request(user: int, t: int, rid: str) -> RequestEvent:
    return RequestEvent(rid, user, t, "home", (1, 2, 3))


def test_work_is_applied_only_when_due_and_the_rest_when_the_stream_ends() -> None:
    done: list[str] = []
    pipe = DelayedPipeline(ConstantDelay(1_000))
    pipe.defer(_request(1, T0, "a"))
    pipe.defer(_request(2, T0 + 500, "b"))
    pipe.defer(ImpressionEvent("b", 2, 3, T0 + 500, 0, 1))
    pipe.run_before(T0 + 1_000, lambda e: done.append(getattr(e, "request_id", "")))
    assert done == []  # "a" is due at T0 + 1000: not strictly before
    pipe.run_before(T0 + 1_001, lambda e: done.append(e.request_id))
    assert done == ["a"]
    pipe.drain(lambda e: done.append(e.request_id))
    assert done == ["a", "b", "b"] and len(pipe) == 0


def test_at_zero_delay_the_last_millisecond_is_not_lost() -> None:
    """Events at the stream's last event time are due at that time; nothing later comes to
    run them, so only the drain applies them (before it, the simulator dropped them)."""
    done: list[str] = []
    pipe = DelayedPipeline(ConstantDelay(0))
    pipe.defer(_request(1, T0, "last"))
    pipe.run_before(T0, done.append)  # the last event's own turn: due == now, not before
    assert done == []
    pipe.drain(lambda e: done.append(e.request_id))
    assert done == ["last"]

"""Worker settings that reach Faust (and aiokafka): the consumer-group session timeout and the
producer linger."""

from __future__ import annotations

import pydantic
import pytest

from streams.live.app import faust_app
from streams.settings import Settings


def test_session_timeout_from_the_environment_reaches_faust(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SOLARIS_CONSUMER_SESSION_TIMEOUT_S", "12")
    app = faust_app(Settings(topic_prefix="session-unit"), "session-unit", None, "memory://")
    assert app.conf.broker_session_timeout == 12.0
    assert app.conf.broker_heartbeat_interval == 4.0  # a third of it


def test_default_is_kafkas_and_the_brokers_bounds_are_enforced() -> None:
    assert Settings().consumer_session_timeout_s == 45.0
    with pytest.raises(pydantic.ValidationError):
        Settings(consumer_session_timeout_s=5.0)  # below the broker's 6 s minimum


def test_producer_linger_reaches_faust_in_seconds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOLARIS_PRODUCER_LINGER_MS", "7")
    app = faust_app(Settings(topic_prefix="linger-unit"), "linger-unit", None, "memory://")
    assert app.conf.producer_linger == pytest.approx(0.007)
    monkeypatch.delenv("SOLARIS_PRODUCER_LINGER_MS")
    assert Settings().producer_linger_ms == 5.0


def test_the_agents_producer_gives_up_a_delivery_after_the_message_timeout() -> None:
    """A broker away longer than this fails the delivery (the batch is then run again)."""
    from streams.live.sends import sender_overrides

    assert sender_overrides(Settings())["message.timeout.ms"] == 300_000  # librdkafka's default
    short = sender_overrides(Settings(producer_message_timeout_ms=2_000))
    assert short == {"enable.idempotence": True, "linger.ms": 5.0, "message.timeout.ms": 2_000}

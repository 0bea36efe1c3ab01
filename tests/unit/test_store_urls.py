"""Credentials in store URLs stay out of reprs, logs and errors."""

from __future__ import annotations

from store.urls import redact_url
from streams.settings import Settings


def test_redact_url_hides_only_the_password() -> None:
    assert redact_url("redis://app:s3cret@10.0.0.5:6380/1") == "redis://app:***@10.0.0.5:6380/1"
    assert redact_url("rediss://:s3cret@cache") == "rediss://:***@cache"
    assert redact_url("redis://127.0.0.1:6379/0") == "redis://127.0.0.1:6379/0"


def test_settings_repr_does_not_show_the_store_password() -> None:
    settings = Settings(store_url="redis://app:s3cret@10.0.0.5:6380/1")
    assert "s3cret" not in repr(settings) and "s3cret" not in str(settings)
    assert settings.store_url.endswith("@10.0.0.5:6380/1")

"""The memory benchmark's pure parts: RSS from /proc and the flatness summary."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bench.memory import rss_bytes, summarise
from schemas.records import RequestEvent

MIB = 2**20


def test_rss_of_this_process_grows_when_it_holds_more_memory() -> None:
    before = rss_bytes(os.getpid())
    assert before is not None and before > 10 * MIB
    block = bytearray(64 * MIB)  # touched: bytearray zero-fills, so the pages are resident
    after = rss_bytes(os.getpid())
    assert after is not None and after - before > 48 * MIB
    del block


def test_rss_of_a_process_that_does_not_exist_is_none() -> None:
    assert rss_bytes(2**22 + 12345) is None


def samples(rss_mib: list[float], total: int) -> list[dict[str, float]]:
    step = total // (len(rss_mib) - 1)
    return [{"events": k * step, "w": r * MIB} for k, r in enumerate(rss_mib)]


def test_a_flat_worker_has_ratio_one_and_no_slope() -> None:
    s = summarise(samples([100.0] * 11, 1000), "w", 1000)
    assert s["end_over_half"] == pytest.approx(1.0)
    assert s["slope_mib_per_100k_events"] == pytest.approx(0.0, abs=1e-9)
    assert s["rss_mib_warm"] == s["rss_mib_end"] == 100.0


def test_a_leak_per_event_shows_as_slope_and_ratio() -> None:
    # +1 MiB per 100 events: 10 MiB over the run, 1,000 MiB per 100 k events
    s = summarise(samples([100.0 + k for k in range(11)], 1000), "w", 1000)
    assert s["slope_mib_per_100k_events"] == pytest.approx(1000.0)
    assert s["rss_mib_half"] == 105.0 and s["rss_mib_end"] == 110.0
    assert s["end_over_half"] == pytest.approx(110 / 105)
    assert s["rss_mib_max"] == 110.0


def test_missing_samples_of_a_worker_are_skipped_not_zero() -> None:
    rows = samples([100.0] * 5, 400)
    rows[2]["w"] = None  # type: ignore[assignment]
    s = summarise(rows, "w", 400)
    assert s["samples"] == 4 and s["rss_mib_max"] == 100.0
    assert summarise([], "w", 400) == {"samples": 0}


def _requests(users: list[int]) -> list[RequestEvent]:
    return [RequestEvent(f"r{i}", u, 1_000 * i, "feed", (1, 2)) for i, u in enumerate(users)]


def test_a_closed_population_drops_the_users_first_seen_in_the_second_half() -> None:
    from bench.memory import closed_population, users_seen

    events = _requests([1, 2, 1, 3, 2, 4, 1, 3])  # half = 4 events: users 1, 2, 3 seen by then
    kept = closed_population(events)
    assert [e.user_id for e in kept] == [1, 2, 1, 3, 2, 1, 3]
    assert users_seen(events) == {"users_seen_at_half": 3, "users_seen_at_end": 4}
    assert users_seen(kept)["users_seen_at_end"] == 3


def test_an_unknown_population_is_refused(tmp_path: Path) -> None:
    from bench.memory import population_traffic

    assert population_traffic(tmp_path / "t.avro", "open") == tmp_path / "t.avro"
    with pytest.raises(ValueError, match="population must be one of"):
        population_traffic(tmp_path / "t.avro", "half")


def test_short_lifetimes_make_every_table_value_dead_well_before_half_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With ``--lifetimes short`` the second half is steady state: every expiring table's
    value (its lifetime plus the expiry grace, as the sweep computes them) dies within a quarter
    of the replay, and the settings the workers will read accept every override."""
    from bench.memory import FULL_SPEC, lifetime_env
    from streams.engine.config import EngineConfig
    from streams.engine.steps.expiry import EXPIRING_TABLES, lifetimes
    from streams.settings import Settings

    span_ms = int(FULL_SPEC.days * 86_400_000)
    env = lifetime_env("short", FULL_SPEC)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    settings = Settings()
    cfg = EngineConfig.from_settings(settings)
    dead_after = {t: ms + cfg.table_expiry_grace_ms for t, ms in lifetimes(cfg).items()}
    assert set(dead_after) == set(EXPIRING_TABLES)
    assert max(dead_after.values()) <= span_ms // 4
    assert settings.pair_in_flight_timeout_ms < settings.refresh_after_ms <= settings.pair_ttl_ms
    assert settings.aggregate_ttl_ms <= span_ms // 8
    assert 0 < settings.table_sweep_interval_s <= 60
    assert lifetime_env("default", FULL_SPEC) == {}
    with pytest.raises(ValueError, match="lifetimes must be one of"):
        lifetime_env("long", FULL_SPEC)

"""The demo's offline side: the simulator on the replayed requests, in lockstep and with the
pipeline latency the live run had.

A timed replay compresses event time: a pipeline that needs L wall seconds from request to stored
embedding is L × speed *event-time* seconds behind its users, and a user's next request inside
that window finds nothing new. The lockstep simulator assumes zero latency. The simulator with ``delays``
runs the same engine with every pipeline step of an event (speculate → verify → embed → write,
and the impression's history update) applied late by a
:class:`~streams.simulate.latency.DelaySchedule` (the simulator's scheduling hook), while the
ranker's reads stay on time, so "live at speed N" can be compared with "offline at the latency measured in
that run". The schedule is either one constant delay (:class:`ConstantDelay`) or the delays the
demo measured for each request (:class:`MeasuredDelays`, from ``streams.app.demo_delays``): a
request's pipeline lands when its ``embeddings`` message did, an impression's history update as
late as the pipeline worker was then. Results are cached per (traffic, bundle, settings,
schedule): the simulator is deterministic, and a warm demo should not recompute them.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import statistics
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from schemas.records import ImpressionEvent, RequestEvent
from streams.engine.models import EngineModels
from streams.settings import Settings
from streams.simulate.config import SimConfig
from streams.simulate.latency import ConstantDelay, DelaySchedule
from streams.simulate.simulator import Simulator

#: delays are rounded to this many significant digits, so nearby measurements share a cache entry
DELAY_DIGITS = 2


def round_delay_ms(delay_ms: int) -> int:
    """``delay_ms`` rounded to :data:`DELAY_DIGITS` significant digits of whole seconds."""
    seconds = max(round(delay_ms / 1000), 0)
    if seconds == 0:
        return 0
    step = 10 ** max(len(str(seconds)) - DELAY_DIGITS, 0)
    return round(seconds / step) * step * 1000


@dataclass(frozen=True)
class MeasuredDelays:
    """Delays measured per request in a live run (request id → ms of event time).

    ``embedded``: until the request's ``embeddings`` message appeared (its pairs were stored
    just before); ``verified``: until its ``verified`` message did, i.e. how far the pipeline
    worker (which also keeps the histories) trailed the replay. A request the pipeline proposed
    nothing for has no message: it takes the delay of the newest measured request at or before
    it, and an impression the verify delay of the newest request at or before it.
    """

    embedded: Mapping[str, int]
    verified: Mapping[str, int]
    times: Mapping[str, int]  #: request id → event time, for the time-local fallback
    _emb: tuple[list[int], list[int]] = field(init=False, repr=False)
    _ver: tuple[list[int], list[int]] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_emb", self._series(self.embedded))
        object.__setattr__(self, "_ver", self._series(self.verified))

    def _series(self, delays: Mapping[str, int]) -> tuple[list[int], list[int]]:
        rows = sorted((self.times[rid], d) for rid, d in delays.items() if rid in self.times)
        return [t for t, _ in rows], [d for _, d in rows]

    @staticmethod
    def _at(series: tuple[list[int], list[int]], t: int) -> int:
        times, delays = series
        if not times:
            return 0
        return delays[max(bisect.bisect_right(times, t) - 1, 0)]

    def request_ms(self, r: RequestEvent) -> int:
        d = self.embedded.get(r.request_id)
        return d if d is not None else self._at(self._emb, r.event_time_ms)

    def impression_ms(self, imp: ImpressionEvent) -> int:
        return self._at(self._ver, imp.event_time_ms)

    def median_ms(self) -> int:
        return int(statistics.median(self.embedded.values())) if self.embedded else 0

    def summary_s(self) -> dict[str, dict[str, float]]:
        """Count, p50, p90 and max (seconds of event time) of each measured delay."""
        out: dict[str, dict[str, float]] = {}
        for name, delays in (("embedded", self.embedded), ("verified", self.verified)):
            if delays:
                ordered = sorted(delays.values())
                n = len(ordered)
                p50, p90 = (ordered[min(int(q * n), n - 1)] / 1000.0 for q in (0.5, 0.9))
                out[name] = {"n": n, "p50": p50, "p90": p90, "max": ordered[-1] / 1000.0}
        return out


def _cache_path(settings: Settings, traffic: Path, bundle: Path, kind: str) -> Path:
    # the traffic's content, not its mtime: `solaris demo` rewrites the same slice every run
    content = hashlib.sha256(traffic.read_bytes()).hexdigest()
    key = json.dumps([content, str(bundle), kind, settings.model_dump_json()])
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return settings.cache_dir / "run" / "demo-offline" / f"{traffic.stem}-{kind}-{digest}.json"


def cached(
    settings: Settings, traffic: Path, bundle: Path, kind: str, compute: Callable[[], Any]
) -> Any:
    """``compute()``'s JSON-able result, stored once per (traffic content, bundle, settings,
    kind)."""
    path = _cache_path(settings, traffic, bundle, kind)
    if path.exists():
        return json.loads(path.read_text())
    result = compute()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, default=float))
    return result


def lockstep_offline(settings: Settings, bundle: Path, traffic: Path) -> dict[str, Any]:
    """The simulator's report on ``traffic``, configured like the live pipeline (cached)."""

    def compute() -> dict[str, Any]:
        from models.data.traffic import read_traffic
        from streams.simulate.run import simulate

        models, config = _models_and_config(settings, bundle, traffic)
        return simulate(lambda: read_traffic(traffic), config, models, with_random=False)

    result: dict[str, Any] = cached(settings, traffic, bundle, "lockstep", compute)
    return result


def offline_at_latency(
    settings: Settings, bundle: Path, traffic: Path, delays: DelaySchedule | int
) -> dict[str, Any]:
    """Coverage and FM cost of the simulator whose pipeline lags the ranker by ``delays`` in
    event time. An int is one constant delay, rounded by :func:`round_delay_ms` and cached;
    measured per-request delays differ every run, so they are not."""
    if isinstance(delays, int):
        delays = ConstantDelay(round_delay_ms(delays))
    schedule = delays

    def compute() -> dict[str, Any]:
        from models.data.traffic import read_traffic
        from streams.simulate.report import run_summary
        from streams.simulate.run import gated

        models, config = _models_and_config(settings, bundle, traffic, with_eval=False)
        sim = Simulator(gated(config, models.fm), models, delays=schedule)
        sim.run(read_traffic(traffic))
        s = run_summary(sim)
        keys = ("cumulative", "fm_pairs_per_request", "speculation_precision")
        return {k: s[k] for k in keys}

    if isinstance(schedule, ConstantDelay):
        kind = f"delay{schedule.delay_ms}"
        result: dict[str, Any] = cached(settings, traffic, bundle, kind, compute)
        return {**result, "delay_ms": schedule.delay_ms}
    median = schedule.median_ms() if isinstance(schedule, MeasuredDelays) else None
    return {**compute(), "delay_ms": median, "delays": "measured per request"}


def _models_and_config(
    settings: Settings, bundle: Path, traffic: Path, with_eval: bool = True
) -> tuple[EngineModels, SimConfig]:
    from models.data.traffic import load_requests
    from streams.models_loader import load_models
    from streams.simulate.config import sim_config_from_settings

    models, _ = load_models(settings, bundle)
    times = load_requests(traffic).event_time_ms
    first = int(times.min()) if len(times) else 0
    config = sim_config_from_settings(
        settings,
        models.fm.dim,
        test_start_ms=first if with_eval else None,  # NE on every impression
        model_version=models.fm.model_version,
    )
    return models, config

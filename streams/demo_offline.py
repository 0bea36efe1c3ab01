"""The demo's offline side: the simulator on the replayed requests, in lockstep and with the
pipeline latency the live run had.

A timed replay compresses event time: a pipeline that needs L wall seconds from request to stored
embedding is L × speed *event-time* seconds behind its users, and a user's next request inside
that window finds nothing new. The lockstep simulator assumes zero latency. :class:`LatencySimulator`
runs the same engine with every pipeline step of an event (speculate → verify → embed → write,
and the impression's history update) applied ``delay_ms`` of event time late, while the ranker's
reads stay on time, so "live at speed N" can be compared with "offline at the latency measured in
that run". Both results are cached per (traffic, bundle, settings, delay): the simulator is
deterministic, and a warm demo should not spend its minutes recomputing them.
"""

from __future__ import annotations

import hashlib
import json
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from schemas.records import ImpressionEvent, RequestEvent
from store.protocol import FeatureStore
from streams.engine.models import EngineModels
from streams.engine.steps.history import observe_impression
from streams.settings import Settings
from streams.simulate.config import SimConfig
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


class LatencySimulator(Simulator):
    """:class:`Simulator` whose pipeline lags the ranker by ``delay_ms`` of event time: an
    event's pipeline work becomes visible to reads at event times after ``t + delay_ms``."""

    def __init__(
        self,
        config: SimConfig,
        models: EngineModels,
        delay_ms: int,
        store: FeatureStore | None = None,
    ) -> None:
        super().__init__(config, models, store)
        self.delay_ms = delay_ms
        self._due: deque[tuple[int, RequestEvent | ImpressionEvent]] = deque()

    def on_request(self, r: RequestEvent) -> None:
        self._apply_due(r.event_time_ms)
        super().on_request(r)  # ranks now; its _pipeline call only queues

    def _pipeline(self, r: RequestEvent) -> None:
        self._due.append((r.event_time_ms + self.delay_ms, r))

    def on_impression(self, imp: ImpressionEvent) -> None:
        """Labelled coverage at once (it describes the read already made); history late."""
        self._apply_due(imp.event_time_ms)
        self._due.append((imp.event_time_ms + self.delay_ms, imp))
        pending = self._pending.get(imp.request_id)
        if pending is None:
            return
        _, position, tiers, _ = pending
        j = position.get(imp.item_id)
        if j is not None:
            self.labelled.add(tiers[j : j + 1])

    def _apply_due(self, t: int) -> None:
        """Run queued pipeline work that finished before event time ``t`` (FIFO = event order)."""
        while self._due and self._due[0][0] < t:
            _, event = self._due.popleft()
            if isinstance(event, RequestEvent):
                Simulator._pipeline(self, event)
            else:
                u = event.user_id
                observe_impression(
                    self.history.mutable(u), event, self.history.capacity, self.lookahead
                )


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
    settings: Settings, bundle: Path, traffic: Path, delay_ms: int
) -> dict[str, Any]:
    """Coverage and FM cost of the simulator whose pipeline lags ``delay_ms`` (rounded by
    :func:`round_delay_ms`) behind the ranker in event time (cached)."""
    delay = round_delay_ms(delay_ms)

    def compute() -> dict[str, Any]:
        from models.data.traffic import read_traffic
        from streams.simulate.report import run_summary
        from streams.simulate.run import gated

        models, config = _models_and_config(settings, bundle, traffic, with_eval=False)
        sim = LatencySimulator(gated(config, models.fm), models, delay)
        sim.run(read_traffic(traffic))
        s = run_summary(sim)
        keys = ("cumulative", "fm_pairs_per_request", "speculation_precision")
        return {"delay_ms": delay, **{k: s[k] for k in keys}}

    result: dict[str, Any] = cached(settings, traffic, bundle, f"delay{delay}", compute)
    return result


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

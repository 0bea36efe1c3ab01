"""Traffic, a trained model bundle and the FM's pair workload, shared by ``fm`` and ``pipeline``.

Both are cached under ``<settings.cache_dir>/bench/``: the synthetic traffic file by its generator
parameters, the bundle by ``ensure_bundle``'s key (traffic bytes + training config), so only the
first ``make bench`` on a machine pays for generating (seconds) and training (about half a minute).

The training config keeps the *serving* architecture of the defaults (d = 64, L from settings,
FM hidden 128, self-attention): FM throughput depends on the architecture, not on how long it
trained, so epochs, seeds and the VM grid are cut to the minimum.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from models.config import TrainConfig
from schemas.records import ImpressionEvent, ProposalBatch
from streams.engine.history import HistoryBook, UserHistory
from streams.settings import Settings

SMALL_TRAIN_OVERRIDES: dict[str, object] = {
    "seeds": 1,
    "fm_epochs": 1,
    "vm_epochs": 2,
    "vm_lrs": (1e-2,),
    "vm_weight_decays": (0.0,),
    "vm_id_dropouts": (0.1,),
    "lags_ms": (0, 600_000),
    "serving_lag_ms": 600_000,
    "bootstrap_replicates": 20,
}
#: Smoke runs only check plumbing: a tiny model trains in seconds.
SMOKE_TRAIN_OVERRIDES: dict[str, object] = {
    **SMALL_TRAIN_OVERRIDES,
    "history_len": 8,
    "embedding_dim": 16,
    "fm_item_dim": 16,
    "fm_hidden": 32,
    "vm_id_dim": 4,
    "vm_hidden": (16,),
}


@dataclass(frozen=True, slots=True)
class TrafficSpec:
    """Synthetic traffic parameters (see ``models.data.synthetic.SyntheticConfig``)."""

    n_users: int
    days: float
    seed: int = 11
    sessions_per_day: float = 2.0

    def file_name(self) -> str:
        return (
            f"traffic-{self.n_users}u-{self.days:g}d-{self.sessions_per_day:g}spd-s{self.seed}.avro"
        )


FULL_TRAFFIC = TrafficSpec(600, 7.0)  # the synthetic default: ~33k requests, ~164k impressions
SMOKE_TRAFFIC = TrafficSpec(30, 2.0, seed=5, sessions_per_day=0.35)  # ~80 requests


def bench_dir(settings: Settings) -> Path:
    path = settings.cache_dir / "bench"
    path.mkdir(parents=True, exist_ok=True)
    return path


def bench_traffic(settings: Settings, spec: TrafficSpec) -> Path:
    """The synthetic traffic file of ``spec`` (generated once, then reused)."""
    path = bench_dir(settings) / spec.file_name()
    if path.exists():
        return path
    from models.data.columns import iter_events
    from models.data.synthetic import SyntheticConfig, generate, synthetic_metadata
    from models.data.traffic import write_traffic

    cfg = SyntheticConfig(
        n_users=spec.n_users,
        days=spec.days,
        seed=spec.seed,
        sessions_per_day=spec.sessions_per_day,
    )
    traffic = generate(cfg)
    tmp = path.with_suffix(".tmp")
    write_traffic(tmp, iter_events(traffic.requests, traffic.impressions), synthetic_metadata(cfg))
    tmp.replace(path)  # atomic: a concurrent run never reads half a file
    return path


def train_config(settings: Settings, smoke: bool) -> TrainConfig:
    """d = 64 and the serving architecture (full runs) or a tiny model (smoke runs)."""
    if smoke:
        return TrainConfig.from_settings(settings, **SMOKE_TRAIN_OVERRIDES)
    return TrainConfig.from_settings(settings, embedding_dim=64, **SMALL_TRAIN_OVERRIDES)


def bench_bundle(settings: Settings, traffic: Path, smoke: bool) -> Path:
    """A trained bundle for ``traffic`` (cached by ``ensure_bundle``)."""
    from models.bundle import ensure_bundle

    return ensure_bundle(traffic, train_config(settings, smoke), bench_dir(settings) / "models")


@dataclass(frozen=True, slots=True)
class PairWorkload:
    """Verified pairs as the ``embed`` agent receives them: one message per request.

    ``messages[j]`` carries its user's history as of the request (what ``verify`` attaches);
    ``histories[j]`` is the same history as a :class:`UserHistory` for in-process runs.
    """

    messages: list[ProposalBatch]
    histories: list[UserHistory]

    @property
    def pairs(self) -> int:
        return sum(len(m.item_ids) for m in self.messages)


def pair_workload(
    traffic: Path,
    history_len: int,
    max_pairs: int,
    share: float = 0.5,
    refresh_after_ms: int = 2 * 3_600_000,
) -> PairWorkload:
    """The first ``max_pairs`` verified pairs of ``traffic``, built like the live pipeline does.

    Per request: the best ``share`` of its candidates (the verifier's default top fraction),
    minus pairs of that user embedded less than ``refresh_after_ms`` ago (the ledger), with the
    user's last ``history_len`` impressions strictly before the request.
    """
    from models.data.traffic import read_traffic

    book = HistoryBook(2 * history_len)
    ledger: dict[int, dict[int, int]] = {}
    messages: list[ProposalBatch] = []
    histories: list[UserHistory] = []
    total = 0
    for ev in read_traffic(traffic):
        if total >= max_pairs:
            break
        if isinstance(ev, ImpressionEvent):
            book.add(ev.user_id, ev.item_id, ev.label, ev.event_time_ms)
            continue
        seen = ledger.setdefault(ev.user_id, {})
        t = ev.event_time_ms
        best = ev.candidates[: max(1, int(len(ev.candidates) * share))]
        items = tuple(i for i in best if t - seen.get(i, -(10**15)) >= refresh_after_ms)
        if not items:
            continue
        items = items[: max_pairs - total]
        for i in items:
            seen[i] = t
        hist = book.before(ev.user_id, t, history_len)
        messages.append(
            ProposalBatch(
                ev.request_id,
                ev.user_id,
                t,
                len(ev.candidates),
                items,
                ("candidates",) * len(items),
                (0.5,) * len(items),
                tuple(hist.items.tolist()),
                tuple(int(x) for x in hist.labels.tolist()),
                tuple(hist.times_ms.tolist()),
            )
        )
        histories.append(hist)
        total += len(items)
    return PairWorkload(messages, histories)


def live_workload(settings: Settings, smoke: bool) -> tuple[Path, Path]:
    """The live benchmarks' traffic file and its trained bundle (smoke: the small ones)."""
    traffic = bench_traffic(settings, SMOKE_TRAFFIC if smoke else FULL_TRAFFIC)
    return traffic, bench_bundle(settings, traffic, smoke)

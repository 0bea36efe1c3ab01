"""Issue 22: the fair VM (streaming user features), tuned KD and the headroom-closure bar, on a
small real training run; the exported bundle serves the fair vm_solaris with the same features."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from streams.engine.config import ENGINE_DEFAULTS

pytest.importorskip("torch")

from models.evaluate import evaluate_runs, markdown
from models.experiment import Impressions, SeedRun, run_seed
from models.features import HistoryIndex, context_features
from models.metrics import headroom_closure, normalized_entropy, transfer_ratio
from models.runtime import TIER_MISSING, UserHistory
from models.transfer_defined import fm_gain_verdict
from tests.unit.test_models_train import TINY, taste_world

FAIR = replace(
    TINY,
    vm_user_features=True,
    vm_epochs=12,
    kd_weights=(0.3, 0.7),
    kd_temperatures=(1.0, 2.0),
    vm_solaris_missing_route="own",  # the missing tier keeps the model's score (tested below)
)


def propensity_world(n_users: int = 240, per_user: int = 40, seed: int = 0) -> Impressions:
    """The taste world plus a per-user engagement propensity (some users like most of what they
    see, others little): with mostly new users in the test period, only the history reveals it.
    """
    base = taste_world(n_users, per_user, seed)
    rng = np.random.default_rng(seed + 1)
    users = np.unique(base.user_id)
    keen = dict(zip(users.tolist(), (rng.random(users.size) < 0.5).tolist(), strict=True))
    p = np.where([keen[u] for u in base.user_id.tolist()], 0.75, 0.12)
    labels = (rng.random(base.label.size) < p).astype(np.int8) | base.label
    return replace(base, label=labels.astype(np.int8))


@pytest.fixture(scope="module")
def impressions() -> Impressions:
    return propensity_world()


@pytest.fixture(scope="module")
def run(impressions: Impressions) -> SeedRun:
    return run_seed(impressions, FAIR, seed=0)


def test_fair_vm_reads_history_the_id_only_vm_cannot(
    impressions: Impressions, run: SeedRun
) -> None:
    """A new user's propensity is only in their history: the fair VM reads it there."""
    y = impressions.label[run.split.test]
    fair = normalized_entropy(y, run.test_probs["vm"])
    id_only = normalized_entropy(y, run.test_probs["vm_id_only"])
    assert fair < id_only - 0.05, (fair, id_only)
    assert run.vms["vm"].user_features and not run.vms["vm_id_only"].user_features
    assert run.vms["vm_solaris"].user_features


def test_kd_is_tuned_on_its_own_weight_temperature_grid(run: SeedRun) -> None:
    gp = run.tuned["vm_kd"]
    assert (gp.kd_weight, gp.kd_temperature) in {
        (w, t) for w in FAIR.kd_weights for t in FAIR.kd_temperatures
    }
    # ... at the optimiser settings the plain vm won
    vm = run.tuned["vm"]
    assert (gp.lr, gp.weight_decay, gp.id_dropout) == (vm.lr, vm.weight_decay, vm.id_dropout)


def test_report_states_the_bar_against_tuned_kd(impressions: Impressions, run: SeedRun) -> None:
    report = evaluate_runs("taste", impressions, [run], FAIR)
    bar = report["beats_kd"]
    models = report["models"]
    assert bar["served_model"] == "vm_solaris_served@10m"  # no engine source in this run
    ne = {k: models[k]["ne"] for k in ("vm", "fm", "vm_kd")}
    ne_served = report["lagged"]["10m"]["models"]["vm_solaris_served"]["ne"]
    tr_kd = transfer_ratio(ne["vm"], ne["vm_kd"], ne["fm"])
    tr_served = transfer_ratio(ne["vm"], ne_served, ne["fm"])
    assert bar["tr_kd"] == pytest.approx(tr_kd)
    assert bar["headroom_closure"] == pytest.approx(headroom_closure(tr_served, tr_kd))
    assert bar["ne_kd_minus_served"] == pytest.approx(ne["vm_kd"] - ne_served)
    lo, hi = bar["ne_kd_minus_served_ci95"]
    assert lo <= bar["ne_kd_minus_served"] <= hi and lo < hi
    # the bar's ceiling: the FM itself against tuned KD, paired on the same resamples
    ceiling = bar["ceiling"]
    assert ceiling["ne_kd_minus_fm"] == pytest.approx(ne["vm_kd"] - ne["fm"])
    c_lo, c_hi = ceiling["ne_kd_minus_fm_ci95"]
    assert c_lo <= ceiling["ne_kd_minus_fm"] <= c_hi and c_lo < c_hi
    assert ceiling["fm_beats_kd"] == fm_gain_verdict((c_lo, c_hi))
    assert all(b["ceiling"] == ceiling for k, b in report.items() if k.startswith("beats_kd"))
    assert report["vm_baseline"].startswith("fair")
    assert "solaris_item_aware" in report["lagged"]["10m"]["transfer_ratio"]
    vs = report["vs_id_only"]
    assert vs["baseline"] == "vm_id_only" and {"kd", "solaris"} <= set(vs["transfer_ratio"])
    assert vs["fair_vm_gain"]["ne"] == pytest.approx(
        models["vm_id_only"]["ne"] - models["vm"]["ne"]
    )
    deg = report["degradation"]
    assert deg["model"] == "vm_solaris_unavailable@10m"
    unavailable_ne = report["lagged"]["10m"]["models"]["vm_solaris_unavailable"]["ne"]
    assert deg["ne_missing_minus_vm"] == pytest.approx(unavailable_ne - ne["vm"])
    assert deg["holds"] == (deg["ci95"][0] <= 0)
    missing_ne = report["lagged"]["10m"]["models"]["vm_solaris_missing"]["ne"]
    assert deg["missing_tier"]["ne_minus_vm"] == pytest.approx(missing_ne - ne["vm"])
    text = markdown(report)
    assert "Every input unavailable, a store outage (vm_solaris_unavailable@10m)" in text
    assert "Every row on the missing tier" in text
    assert f"headroom closure h = {bar['headroom_closure']:.3f}" in text
    assert "Against the id-only VM" in text


def whole_histories(impressions: Impressions, users: np.ndarray) -> list[UserHistory]:
    """Each row's user's every impression (the scorer cuts it before the row's time)."""
    return [
        UserHistory(
            impressions.item_id[impressions.user_id == u],
            impressions.label[impressions.user_id == u],
            impressions.event_time_ms[impressions.user_id == u],
        )
        for u in users
    ]


def test_bundle_serves_the_fair_vm_solaris_with_training_features(
    impressions: Impressions, run: SeedRun, tmp_path: Path
) -> None:
    """Exported: vm.onnx stays the id-only verifier; vm_solaris.onnx computes the user features
    from plain histories and scores like the torch model fed the training-side features."""
    import torch

    from models.builder import json_safe, write_bundle
    from models.bundle import load_bundle
    from models.user_features import user_stream_inputs

    report = json_safe(evaluate_runs("taste", impressions, [run], FAIR))
    write_bundle([run], report, FAIR, tmp_path, "f" * 20, {"dataset": "taste"})
    bundle = load_bundle(tmp_path)
    assert not bundle.vm.user_features and bundle.solaris.user_features
    rows = run.split.test[:64]
    users, items = impressions.user_id[rows], impressions.item_id[rows]
    times = impressions.event_time_ms[rows]
    hists = whole_histories(impressions, users)
    n, dim = len(rows), FAIR.embedding_dim
    tiers = np.full(n, TIER_MISSING, np.int64)
    served = bundle.solaris.score(users, items, times, np.zeros((n, dim), np.float32), tiers, hists)
    index = HistoryIndex(
        impressions.user_id, impressions.item_id, impressions.label, impressions.event_time_ms
    )
    feats = user_stream_inputs(
        run.item_vocab, items, times, index.gather(users, times, FAIR.history_len)
    )
    model = run.vms["vm_solaris"].eval()
    with torch.no_grad():
        z = model(
            torch.from_numpy(run.user_vocab.lookup(users)),
            torch.from_numpy(run.item_vocab.lookup(items)),
            torch.from_numpy(context_features(times)),
            embedding=torch.zeros(n, dim),
            tier=torch.from_numpy(tiers),
            user_stats=torch.from_numpy(feats["user_stats"]),
            recent_pos=torch.from_numpy(feats["recent_pos"]),
        )
    np.testing.assert_allclose(served, torch.sigmoid(z).numpy(), atol=1e-5)
    from models.errors import InputError

    with pytest.raises(InputError, match="user stream features"):
        bundle.solaris.score(users, items, times, np.zeros((n, dim), np.float32), tiers)


def test_bundle_ships_the_fair_vm_as_the_simulators_transfer_baseline(
    impressions: Impressions, run: SeedRun, tmp_path: Path
) -> None:
    """vm_fair.onnx is the ranking VM with its streaming features (the baseline the issue's
    ratios are against), scoring like the torch model; a bundle without it still loads."""
    import torch

    from models.builder import json_safe, write_bundle
    from models.bundle import FAIR_VM_FILE, load_bundle
    from models.user_features import user_stream_inputs

    report = json_safe(evaluate_runs("taste", impressions, [run], FAIR))
    write_bundle([run], report, FAIR, tmp_path, "f" * 20, {"dataset": "taste"})
    bundle = load_bundle(tmp_path)
    assert bundle.vm_fair is not None and bundle.vm_fair.user_features
    rows = run.split.test[:64]
    users, items = impressions.user_id[rows], impressions.item_id[rows]
    times = impressions.event_time_ms[rows]
    index = HistoryIndex(
        impressions.user_id, impressions.item_id, impressions.label, impressions.event_time_ms
    )
    hists = whole_histories(impressions, users)
    served = bundle.vm_fair.score(users, items, times, hists)
    feats = user_stream_inputs(
        run.item_vocab, items, times, index.gather(users, times, FAIR.history_len)
    )
    with torch.no_grad():
        z = run.vms["vm"].eval()(
            torch.from_numpy(run.user_vocab.lookup(users)),
            torch.from_numpy(run.item_vocab.lookup(items)),
            torch.from_numpy(context_features(times)),
            user_stats=torch.from_numpy(feats["user_stats"]),
            recent_pos=torch.from_numpy(feats["recent_pos"]),
        )
    np.testing.assert_allclose(served, torch.sigmoid(z).numpy(), atol=1e-5)
    (tmp_path / FAIR_VM_FILE).unlink()  # a bundle from before CODE_VERSION 11
    assert load_bundle(tmp_path).vm_fair is None


def test_ranker_feeds_the_fair_vm_solaris_the_history_from_the_same_read(
    impressions: Impressions, run: SeedRun, tmp_path: Path
) -> None:
    """The engine's ranker reads the user's stored history in its one round trip and scores
    exactly as the bundle's vm_solaris does fed that history directly (the simulator's path)."""
    from models.builder import json_safe, write_bundle
    from models.bundle import load_bundle
    from schemas.records import RequestEvent
    from store.history_values import encode_history
    from store.memory import InMemoryStore
    from store.reader import FeatureReader
    from streams.engine.ranker import rank

    report = json_safe(evaluate_runs("taste", impressions, [run], FAIR))
    write_bundle([run], report, FAIR, tmp_path, "f" * 20, {"dataset": "taste"})
    bundle = load_bundle(tmp_path)
    # the taste world's clock starts at 0; the store holds only real event times, so shift by
    # whole weeks (the VM's hour and weekday features stay the same)
    week = 7 * 86_400_000
    times = impressions.event_time_ms + 1_044 * week
    row = int(run.split.test[len(run.split.test) // 2])
    user, t = int(impressions.user_id[row]), int(times[row])
    mine = np.flatnonzero(impressions.user_id == user)
    mine = mine[np.argsort(times[mine], kind="stable")]
    entries = [
        (int(impressions.item_id[j]), int(impressions.label[j]), int(times[j])) for j in mine
    ]
    assert sum(1 for e in entries if e[2] < t) >= 3  # the user has a history before t
    store = InMemoryStore(clock_ms=lambda: t)
    store.write_histories({user: encode_history(entries)}, 3_600_000)
    items = tuple(int(i) for i in np.unique(impressions.item_id)[:20])
    reader = FeatureReader(store, replace(ENGINE_DEFAULTS.reader, dim=FAIR.embedding_dim))
    res = rank(RequestEvent("r", user, t, "feed", items), reader, bundle.solaris)
    assert store.round_trips == 1 and res.history is not None and len(res.history) == len(mine)
    n = len(items)
    args = (
        np.full(n, user, np.int64),
        np.asarray(items, np.int64),
        np.full(n, t, np.int64),
        np.zeros((n, FAIR.embedding_dim), np.float32),
        np.full(n, TIER_MISSING, np.int64),
    )
    direct = UserHistory(impressions.item_id[mine], impressions.label[mine], times[mine])
    np.testing.assert_array_equal(res.scores, bundle.solaris.score(*args, [direct] * n))
    # ... and the history matters: as a new user the same candidates score otherwise
    assert not np.allclose(res.scores, bundle.solaris.score(*args, [UserHistory.empty()] * n))

    # a store that cannot be read: the rows are unavailable, scored by the graph's baseline VM
    # (the fair vm), not replaced by the id-only plain VM
    from store.errors import StoreUnavailable
    from streams.engine.ranker import needs_baseline

    class Down(InMemoryStore):
        def read(self, batch, timeout_ms):  # type: ignore[no-untyped-def]
            raise StoreUnavailable("down")

    assert bundle.solaris.baseline_on_unavailable
    down = FeatureReader(Down(), replace(ENGINE_DEFAULTS.reader, dim=FAIR.embedding_dim))
    failed = rank(RequestEvent("r", user, t, "feed", items), down, bundle.solaris)
    assert failed.read_failed and failed.baseline_in_graph and not needs_baseline(failed)
    from models.runtime import TIER_UNAVAILABLE

    unavailable = (*args[:4], np.full(n, TIER_UNAVAILABLE, np.int64))
    want = bundle.solaris.score(*unavailable, [UserHistory.empty()] * n)
    np.testing.assert_array_equal(failed.scores, want)
    assert not np.allclose(want, bundle.solaris.score(*args, [UserHistory.empty()] * n))

    # a lookup that served every row but ended past its deadline counts as failed, yet no row
    # was left for the graph's baseline: the scores are vm_solaris's on what was served
    import time

    from schemas.records import PairEmbedding

    class Slow(InMemoryStore):
        def read(self, batch, timeout_ms):  # type: ignore[no-untyped-def]
            time.sleep(0.03)
            return super().read(batch, timeout_ms)

    slow = Slow(clock_ms=lambda: t)
    vec = np.ones(FAIR.embedding_dim, np.float32)
    slow.write_pairs([PairEmbedding.from_array(user, i, t - 1, "fm", vec) for i in items], 60_000)
    late_reader = FeatureReader(
        slow, replace(ENGINE_DEFAULTS.reader, dim=FAIR.embedding_dim, deadline_ms=5.0)
    )
    late = rank(RequestEvent("r", user, t, "feed", items), late_reader, bundle.solaris)
    assert late.read_failed and (late.tiers == 0).all()  # every row exact, but late
    assert not late.baseline_in_graph and not needs_baseline(late)


@pytest.mark.parametrize(
    ("interval", "verdict"),
    [((0.01, 0.03), "positive"), ((-0.01, 0.03), "within noise"), ((-0.04, -0.01), "negative")],
)
def test_fm_gain_verdict_reads_the_interval(interval: tuple[float, float], verdict: str) -> None:
    from models.transfer_defined import fm_gain_verdict

    assert fm_gain_verdict(interval) == verdict


def test_vm_solaris_with_every_input_missing_is_the_baseline_vm(
    impressions: Impressions, run: SeedRun
) -> None:
    """The degradation bar by construction: vm_solaris scores rows of the scorer-only code
    TIER_UNAVAILABLE (the store could not be read) with the frozen vm, so "every input
    unavailable" scores exactly as the plain (fair) VM; the missing tier and served tiers keep
    the model's own scores."""
    import torch

    assert FAIR.vm_solaris_baseline_on_missing
    solaris, vm = run.vms["vm_solaris"], run.vms["vm"]
    assert solaris.base is not None
    for p, q in zip(solaris.base.parameters(), vm.parameters(), strict=True):
        assert torch.equal(p, q)  # the trained vm, untouched by vm_solaris's training
    unavailable = run.test_probs["vm_solaris_unavailable@10m"]
    np.testing.assert_allclose(unavailable, run.test_probs["vm"], atol=1e-6)
    for kept in ("vm_solaris_missing@10m", "vm_solaris_served@10m"):
        assert not np.allclose(run.test_probs[kept], run.test_probs["vm"], atol=1e-3), kept

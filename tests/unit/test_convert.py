"""The interaction-log → traffic converter: request grouping, candidate rules, and no leakage."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from models.data.columns import Impressions, Requests
from models.data.convert import ConvertConfig, convert
from models.data.errors import ConfigError
from models.data.loaders import Interactions, load_dataset
from streams.settings import Settings

T0 = 1_500_000_000_000
S = 1000  # ms per second


def _log(rows: list[tuple[int, int, int, int]]) -> Interactions:
    """(user, item, ms offset from T0, label) rows → Interactions."""
    u, i, t, y = zip(*rows, strict=True)
    return Interactions.build("t", np.array(u), np.array(i), T0 + np.array(t), np.array(y))


def _random_log(
    seed: int, n: int = 3000, users: int = 80, items: int = 300, span_s: int = 3 * 86_400
) -> Interactions:
    rng = np.random.default_rng(seed)
    # Bursty times: sessions of a few interactions seconds apart, sessions minutes to hours apart.
    t = np.sort(rng.integers(0, span_s * S, n))
    t[1::3] = t[0::3][: t[1::3].shape[0]] + rng.integers(0, 40 * S, t[1::3].shape[0])
    pop = 1.0 / np.arange(1, items + 1)
    return Interactions.build(
        "rnd",
        rng.integers(1, users + 1, n),
        rng.choice(items, n, p=pop / pop.sum()) + 1,
        t,
        rng.integers(0, 2, n),
    )


def _request(requests: Requests, impressions: Impressions, rid: str) -> tuple:
    """Everything the converter emitted for one request id."""
    [i] = np.flatnonzero(requests.request_id == rid)
    mask = impressions.request_index == i
    return (
        int(requests.user_id[i]),
        int(requests.event_time_ms[i]),
        requests.candidates_of(i).tolist(),
        impressions.item_id[mask].tolist(),
        impressions.position[mask].tolist(),
        impressions.label[mask].tolist(),
    )


def test_grouping_window_starts_at_the_first_interaction() -> None:
    log = _log(
        [
            (1, 10, 0, 0),
            (1, 11, 10 * S, 1),
            (1, 12, 59 * S, 0),
            (1, 13, 61 * S, 1),
            (1, 14, 200 * S, 0),
            (2, 20, 30 * S, 1),
        ]
    )
    req, imp = convert(log, ConvertConfig(k=10))
    assert req.request_id.tolist() == ["t-1-0", "t-2-0", "t-1-1", "t-1-2"]
    assert req.event_time_ms.tolist() == [T0, T0 + 30 * S, T0 + 61 * S, T0 + 200 * S]
    by_req = [sorted(imp.item_id[imp.request_index == i].tolist()) for i in range(len(req))]
    assert by_req == [[10, 11, 12], [20], [13], [14]]
    assert np.array_equal(imp.event_time_ms, req.event_time_ms[imp.request_index])


def test_repeats_are_one_impression_with_the_max_label_and_bursts_are_capped() -> None:
    log = _log(
        [(1, 10, 0, 0), (1, 10, 5 * S, 1), (1, 11, 6 * S, 0), (1, 12, 7 * S, 0), (1, 13, 8 * S, 1)]
    )
    req, imp = convert(log, ConvertConfig(k=4, max_interacted=2))
    assert len(req) == 2  # 10, 11 | 12, 13: the cap opens a new request
    first = imp.request_index == 0
    assert dict(zip(imp.item_id[first].tolist(), imp.label[first].tolist(), strict=True)) == {
        10: 1,
        11: 0,
    }


def test_candidate_rules() -> None:
    log = _random_log(0)
    cfg = ConvertConfig(k=20, seed=4)
    req, imp = convert(log, cfg)
    assert len(imp) <= len(log)
    for i in range(len(req)):
        cands = req.candidates_of(i).tolist()
        assert len(cands) == len(set(cands)) <= cfg.k
        mask = imp.request_index == i
        items, pos = imp.item_id[mask], imp.position[mask]
        assert [cands[p] for p in pos.tolist()] == items.tolist()  # position = index in list
    # Candidates fill up to k once the log has enough history; impressions = interacted only.
    assert np.mean(req.n_candidates == cfg.k) > 0.9
    pairs_log = set(zip(log.user_id.tolist(), log.item_id.tolist(), strict=True))
    pairs_imp = set(zip(imp.user_id.tolist(), imp.item_id.tolist(), strict=True))
    assert pairs_imp == pairs_log


def test_retrieval_uses_past_co_visitation() -> None:
    # Users 1..5 each view 100 then 200 (co-visited); user 9 later views 100; its next request
    # must retrieve 200. A popular distractor 300 is viewed many times by user 7.
    rows = [
        (u, item, (u * 10 + j) * S * 100, 0)
        for u in range(1, 6)
        for j, item in enumerate((100, 200))
    ]
    rows += [(7, 300, 20_000 * S + j * 100 * S, 0) for j in range(30)]
    rows += [(9, 100, 30_000 * S, 1), (9, 400, 40_000 * S, 1)]
    req, _ = convert(_log(rows), ConvertConfig(k=5, covisit_share=0.6, explore_share=0.0))
    last = req.candidates_of(len(req) - 1).tolist()
    assert req.user_id[-1] == 9 and 200 in last and 400 in last
    assert 100 not in last  # the user's own recent item is not retrieved again


def test_popular_items_fill_what_co_visitation_cannot() -> None:
    # Item i (1..40) is viewed 60 - i times by one heavy user; user 9 then opens a request with
    # no history: free = 19 slots, 2 of them exploration, so the 17 most popular items must all
    # be there.
    rows = []
    for i in range(1, 41):
        rows += [(500 + j, i, (i * 100 + j) * S, 0) for j in range(60 - i)]
    rows.append((9, 999, 10_000 * S, 1))
    req, imp = convert(_log(rows), ConvertConfig(k=20, explore_share=0.1, popular_refresh_s=1.0))
    [r] = np.flatnonzero(req.request_id == "t-9-0")
    cands = req.candidates_of(r).tolist()
    assert len(cands) == 20 and 999 in cands
    assert set(range(1, 18)) <= set(cands)
    assert imp.item_id[imp.request_index == r].tolist() == [999]


@pytest.mark.parametrize("offset_ms", [0, 1])
def test_interactions_at_or_after_t_are_invisible(offset_ms: int) -> None:
    # User 9 views 100, then opens a request at t with item 500. Other users co-visit 100 and
    # 200, and a distractor 300 gets popular, all at t + offset: none of it may show up at t.
    # Positive control: the same rows 1 ms *before* t are visible.
    t = 1_000 * S
    crowd = [(u, item, t + offset_ms, 0) for u in range(20, 30) for item in (100, 200)]
    crowd += [(7, 300, t + offset_ms, 0) for _ in range(30)]
    base = [(9, 100, 0, 1), (9, 500, t, 1), (8, 600, 10 * S, 0)]
    cfg = ConvertConfig(k=10, popular_refresh_s=0.001)
    for shift, visible in ((0, False), (-1 - offset_ms, True)):
        rows = base + [(u, i, ts + shift, y) for u, i, ts, y in crowd]
        req, _ = convert(_log(rows), cfg)
        [r] = np.flatnonzero(req.request_id == "t-9-1")
        cands = set(req.candidates_of(r).tolist())
        assert ({200, 300} <= cands) is visible, (shift, cands)


def _own_rows(log: Interactions, imp: Impressions, r: int, user: int, t: int) -> np.ndarray:
    """Mask of the log rows that make up request ``r`` (its user, its window, its items)."""
    items = imp.item_id[imp.request_index == r]
    return (
        (log.user_id == user)
        & (log.ts_ms >= t)
        & (log.ts_ms <= t + 60 * S)
        & np.isin(log.item_id, items)
    )


def _future_scrambled(
    log: Interactions, user: int, t: int, own: np.ndarray, seed: int
) -> Interactions:
    """Keep everything before ``t`` and the request's own rows; scramble everything else after.

    Later rows get random users/items/labels and shuffled times (all >= t); none goes to the
    request's user inside its window, so grouping cannot change the request itself.
    """
    rng = np.random.default_rng(seed)
    before = log.ts_ms < t
    after = ~before & ~own & ~((log.user_id == user) & (log.ts_ms <= t + 60 * S))
    n = int(after.sum())
    users = rng.integers(1, 120, n)
    users[users == user] += 1000
    parts = [
        (log.user_id[before], log.item_id[before], log.ts_ms[before], log.label[before]),
        (log.user_id[own], log.item_id[own], log.ts_ms[own], log.label[own]),
        (users, rng.integers(1, 500, n), rng.permutation(log.ts_ms[after]), rng.integers(0, 2, n)),
    ]
    cols = [np.concatenate([p[c] for p in parts]) for c in range(4)]
    return Interactions.build(log.name, *cols)


@pytest.mark.parametrize("seed", [0, 1])
def test_no_leakage_changing_the_future_leaves_the_request_unchanged(seed: int) -> None:
    log = _random_log(seed, n=1500, span_s=4 * 3600)  # dense: a row every ~10 s
    cfg = ConvertConfig(k=25, seed=seed, popular_refresh_s=30.0)
    req, imp = convert(log, cfg)
    rng = np.random.default_rng(100 + seed)
    for r in rng.choice(np.arange(len(req) // 3, len(req)), 5, replace=False).tolist():
        rid, user, t = str(req.request_id[r]), int(req.user_id[r]), int(req.event_time_ms[r])
        changed = _future_scrambled(log, user, t, _own_rows(log, imp, r, user, t), seed=r)
        req2, imp2 = convert(changed, cfg)
        assert _request(req2, imp2, rid) == _request(req, imp, rid)
        earlier = int((req.event_time_ms < t).sum())
        assert np.array_equal(req2.request_id[:earlier], req.request_id[:earlier])
        # Sanity: the scramble really changed the future.
        assert not np.array_equal(req2.candidates, req.candidates)


def test_deterministic_and_seeded() -> None:
    log = _random_log(2, n=800)
    a = convert(log, ConvertConfig(seed=1))[0]
    b = convert(log, ConvertConfig(seed=1))[0]
    c = convert(log, ConvertConfig(seed=2))[0]
    assert np.array_equal(a.candidates, b.candidates)
    assert np.array_equal(a.request_id, c.request_id)  # grouping does not depend on the seed
    assert not np.array_equal(a.candidates, c.candidates)  # order / exploration do


@pytest.mark.parametrize(
    "bad",
    [
        {"k": 0},
        {"max_interacted": 60},
        {"covisit_share": 1.5},
        {"covisit_share": 0.8, "explore_share": 0.3},
        {"session_gap_s": -1.0},
        {"recency_decay": 0.0},
    ],
)
def test_bad_config_is_rejected(bad: dict[str, float]) -> None:
    with pytest.raises(ConfigError):
        ConvertConfig(**bad)  # type: ignore[arg-type]


def _data_dir() -> Path:
    path = Settings().data_dir
    if not path.exists():
        pytest.skip(f"real datasets not present at {path} (see ../shared/data/README.md)")
    return path


@pytest.mark.data
def test_real_taobao_slice_converts_leak_free() -> None:
    log, _ = load_dataset("taobao", _data_dir())
    head = log.take(np.arange(20_000))
    req, imp = convert(head)
    assert len(imp) <= len(head) and req.n_candidates.mean() > 45
    for r in (len(req) // 2, len(req) - 100):
        rid, user, t = str(req.request_id[r]), int(req.user_id[r]), int(req.event_time_ms[r])
        past_and_own = head.take((head.ts_ms < t) | _own_rows(head, imp, r, user, t))
        req2, imp2 = convert(past_and_own)  # the whole future dropped
        assert _request(req2, imp2, rid) == _request(req, imp, rid)


def test_a_log_without_negatives_gets_unclicked_candidates_as_negatives(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Implicit feedback (issue 25 item 7): a click log (every row a positive) gets, per
    request, up to ``IMPLICIT_NEGATIVES`` retrieved candidates the user did not interact with,
    labelled 0, instead of a one-class task that cannot be trained."""
    from models.data.convert import IMPLICIT_NEGATIVES, config_for

    base = _random_log(5)
    clicks = Interactions.build(
        "clicks", base.user_id, base.item_id, base.ts_ms, np.ones(len(base), np.int8)
    )
    cfg = config_for(clicks)
    assert cfg.implicit_negatives == IMPLICIT_NEGATIVES
    assert any("implicit feedback" in r.getMessage() for r in caplog.records)
    requests, imps = convert(clicks, cfg)
    assert 0.0 < float(imps.label.mean()) < 1.0
    for r in range(len(requests)):
        mask = imps.request_index == r
        cands = set(requests.candidates_of(r).tolist())
        pos = set(imps.item_id[mask & (imps.label == 1)].tolist())
        neg = imps.item_id[mask & (imps.label == 0)].tolist()
        assert len(neg) <= IMPLICIT_NEGATIVES and set(neg) <= cands and not set(neg) & pos
    # a log with both labels converts as before: no invented negatives
    assert config_for(base).implicit_negatives == 0
    _, plain = convert(base, config_for(base))
    _, again = convert(base, ConvertConfig())
    assert np.array_equal(plain.item_id, again.item_id)

"""What the state tier costs the ranker (issue 22 item 3): CPU per request and bytes per user.

Design B stores one FM user state per user and decodes it for each candidate that has no exact
pair, in the ranker. Measured side by side on one machine, per request of ``candidates`` items,
with default-size models (random weights: timing does not depend on them):

- ``vm_solaris`` scoring alone (what the ranker runs today) — the reference;
- the same ``vm_solaris`` blended with ``vm_kd`` in one graph (``SOLARIS_VM_SOLARIS_KD=blend``:
  a second VM per candidate);
- decoding the request's candidates from a state (``fm_decode.onnx``);
- the whole FM on the same candidates (what the ranker must never run) — for scale.

Bytes per user: the state as float16 next to the user aggregate (one ``d``-vector). Reads per
request: the state is one more key of the user's hash tag in the same first round trip.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import BenchResult, Target, machine_info, percentiles_ms
from store.tiers import Tier
from streams.settings import Settings

ITEMS = 10_000
CANDIDATES = 50


def _models(tmp: Path, history_len: int, dim: int) -> tuple[Any, Any, Any, Any]:
    import torch

    from models.blend import Blend
    from models.blend_vm import BlendedVM
    from models.export import export_fm, export_fm_split, export_vm
    from models.features import Vocab
    from models.fm import FoundationModel
    from models.runtime import FMRunner, OnnxSession, SolarisRunner, StateRunner
    from models.vm import VerticalModel

    torch.manual_seed(0)
    fm = FoundationModel(ITEMS + 2, dim=dim).eval()
    vm = VerticalModel(1_000, ITEMS + 2, embedding_dim=dim).eval()
    props = {"model_version": "bench"}
    vocab = Vocab(np.arange(1, ITEMS + 1, dtype=np.int64))
    users = Vocab(np.arange(1, 1_000, dtype=np.int64))
    full = FMRunner(
        OnnxSession(export_fm(fm, history_len, tmp / "fm.onnx", props)),
        vocab,
        history_len,
        "b",
        dim,
    )
    state_path, decode_path = export_fm_split(fm, history_len, tmp, props)
    split = StateRunner(OnnxSession(state_path), OnnxSession(decode_path), vocab, history_len, dim)
    solaris = SolarisRunner(
        OnnxSession(export_vm(vm, "vm_solaris", tmp / "vm_solaris.onnx", props)), users, vocab, dim
    )
    kd = VerticalModel(1_000, ITEMS + 2).eval()  # vm_kd: no store inputs
    blended = SolarisRunner(
        OnnxSession(
            export_vm(BlendedVM(vm, kd, Blend(0.8, 0.2, 0.0)), "vm_solaris", tmp / "b.onnx", props)
        ),
        users,
        vocab,
        dim,
    )
    return full, split, solaris, blended


def _time(fn: Any, repeats: int) -> list[float]:
    fn()  # warm
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def _readers(split: Any, state: np.ndarray, dim: int, now: int) -> tuple[Any, Any, dict[str, int]]:
    """Two readers over one in-memory store holding a user's aggregate and its two newest FM
    states (what the store keeps, :mod:`store.state_slots`; the newest carries the request's
    own time, so the lookup serves the previous one, as it does when the pipeline stored this
    request's state first): one serves the state tier (decodes), one the aggregate (what the
    ranker read before the state tier); and the stored bytes of each key."""
    from dataclasses import replace

    from schemas.records import UserAggregate
    from schemas.vectors import VectorDtype
    from store.memory import InMemoryStore
    from store.protocol import ReadBatch
    from store.reader import FeatureReader
    from store.values import encode_state
    from streams.engine.config import ENGINE_DEFAULTS

    store = InMemoryStore(clock_ms=lambda: now)
    agg = UserAggregate.from_array(7, now - 1, 86_400_000, 3, "bench", np.ones(dim, np.float32))
    store.write_aggregates([agg], 3_600_000)
    store.write_states(
        [(7, encode_state(t, "bench", state[0], VectorDtype.FLOAT16)) for t in (now - 1, now)],
        3_600_000,
    )
    raw = store.read(ReadBatch(aggregates=[7], states=[7]), 100)
    stored = {
        "state_key": len(raw.states[0] or b""),
        "aggregate_key": len(raw.aggregates[0] or b""),
    }
    cfg = replace(ENGINE_DEFAULTS.reader, dim=dim, version_tag=None)
    return FeatureReader(store, cfg, states=split), FeatureReader(store, cfg), stored


#: an FM worker group in the bench: messages of this many pairs each
FM_GROUP_MESSAGES, PAIRS_PER_MESSAGE = 16, 15


def _fm_worker_timings(
    full: Any, split: Any, hist: Any, now: int, repeats: int
) -> dict[str, list[float]]:
    """The FM worker's embed of one group of verified messages: the whole FM per pair against
    the split FM (one history encoding per message, the head per pair): what it embeds with
    when the bundle has the split FM."""
    from schemas.records import ProposalBatch
    from streams.engine.embedder import Embedder

    rng = np.random.default_rng(1)
    batches = [
        ProposalBatch(
            f"r{m}",
            m,
            now,
            50,
            tuple(int(i) for i in rng.integers(1, ITEMS, PAIRS_PER_MESSAGE)),
            ("candidates",) * PAIRS_PER_MESSAGE,
        )
        for m in range(FM_GROUP_MESSAGES)
    ]
    hists = [hist] * FM_GROUP_MESSAGES
    whole, by_message = Embedder(full), Embedder(full, split=split)
    n = max(repeats // 10, 5)
    return {
        "embed_group_whole_fm": _time(lambda: whole.embed_messages(batches, hists), n),
        "embed_group_split_fm": _time(lambda: by_message.embed_messages(batches, hists), n),
    }


def run_state(settings: Settings, _: Any = None, smoke: bool = False) -> BenchResult:
    from models.runtime import TIER_AGGREGATE, UserHistory

    length, dim = settings.history_len, settings.embedding_dim
    repeats = 20 if smoke else 400
    rng = np.random.default_rng(0)
    now = 1_700_000_000_000
    hist = UserHistory.of(
        rng.integers(1, ITEMS, length).tolist(),
        rng.integers(0, 2, length).tolist(),
        sorted(rng.integers(now - 3_600_000, now, length).tolist()),
    )
    items = rng.integers(1, ITEMS, CANDIDATES).astype(np.int64)
    times = np.full(CANDIDATES, now, np.int64)
    users = np.full(CANDIDATES, 7, np.int64)
    with tempfile.TemporaryDirectory(prefix="solaris-bench-state-") as tmp:
        full, split, solaris, blended = _models(Path(tmp), length, dim)
        state = split.states(times[:1], [hist])
        states = np.repeat(state, CANDIDATES, axis=0)
        vectors = np.zeros((CANDIDATES, dim), np.float32)
        tiers = np.full(CANDIDATES, TIER_AGGREGATE, np.int64)
        timings = {
            "vm_solaris": _time(
                lambda: solaris.score(users, items, times, vectors, tiers), repeats
            ),
            "vm_solaris_blend": _time(
                lambda: blended.score(users, items, times, vectors, tiers), repeats
            ),
            "decode": _time(lambda: split.decode(items, states), repeats),
            "fm": _time(lambda: full.embed(users, items, times, [hist] * CANDIDATES), repeats),
        }
        timings.update(_fm_worker_timings(full, split, hist, now, repeats))
        with_state, aggregate_only, stored = _readers(split, state, dim, now)
        served = with_state.lookup(7, items.tolist(), now).tiers
        timings["lookup_state_tier"] = _time(
            lambda: with_state.lookup(7, items.tolist(), now), repeats
        )
        timings["lookup_aggregate_tier"] = _time(
            lambda: aggregate_only.lookup(7, items.tolist(), now), repeats
        )
        trips = {
            name: r.stats.round_trips / max(r.stats.calls, 1)
            for name, r in (("state", with_state), ("aggregate", aggregate_only))
        }
        width = split.width
    lat = {k: percentiles_ms(v) for k, v in timings.items()}
    state_bytes, aggregate_bytes = stored["state_key"], stored["aggregate_key"]
    ratios: dict[str, float | None] = {
        "decode_over_vm_solaris_p50": lat["decode"]["p50"] / lat["vm_solaris"]["p50"],
        "blend_over_vm_solaris_p50": lat["vm_solaris_blend"]["p50"] / lat["vm_solaris"]["p50"],
        "decode_over_fm_p50": lat["decode"]["p50"] / lat["fm"]["p50"],
        "state_over_aggregate_bytes": state_bytes / aggregate_bytes,
        "lookup_state_over_aggregate_p50": lat["lookup_state_tier"]["p50"]
        / lat["lookup_aggregate_tier"]["p50"],
        "fm_group_split_over_whole_p50": lat["embed_group_split_fm"]["p50"]
        / lat["embed_group_whole_fm"]["p50"],
    }
    return BenchResult(
        "state",
        machine_info(),
        results={
            "candidates": CANDIDATES,
            "history_len": length,
            "dim": dim,
            "latency_ms": lat,
            "state_width_floats": width,
            # measured: the stored value of each key (the state key holds two float16 states)
            "bytes_per_user": {"state_key": state_bytes, "aggregate_key": aggregate_bytes},
            "extra_keys_per_request": 1,
            # measured: the reader's round trips per lookup with and without the state tier
            "round_trips_per_lookup": trips,
            "lookup_served_state_tier": bool((served == Tier.STATE).all()),
        },
        ratios=ratios,
        targets={"decode_over_fm_p50": Target(0.5, upper=True)},
        smoke=smoke,
    )


def state_table(res: BenchResult) -> list[list[str]]:
    lat = res.results["latency_ms"]
    return [
        [name, f"{lat[name]['p50']:.3f}", f"{lat[name]['p99']:.3f}"]
        for name in (
            "vm_solaris",
            "vm_solaris_blend",
            "decode",
            "fm",
            "lookup_state_tier",
            "lookup_aggregate_tier",
            "embed_group_whole_fm",
            "embed_group_split_fm",
        )
    ]

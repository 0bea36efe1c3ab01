"""One bad message in a batch is dead-lettered alone (``processing_error`` with its error text)
and the rest of the batch is processed: the verify, speculate, aggregate and embed agents under
the unit harnesses of ``test_agents`` (``run``) and ``test_embed_agent`` (``run_embed``)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence
from typing import Any

import faust
import numpy as np
import pytest

from schemas.records import DeadLetter, EmbeddingBatch, PairEmbedding, ProposalBatch, RequestEvent
from store.memory import InMemoryStore
from streams.engine.aggregator import AggregateState, RollingAggregator
from streams.engine.embedder import Embedder
from streams.engine.models import EngineModels
from streams.engine.state import LEDGER
from streams.engine.steps import speculate as speculate_steps
from streams.engine.steps import verify as verify_step
from streams.engine.steps.embed import EmbedInput, embed_input, embed_isolating, embedding_batch
from streams.live.agents import embed as embed_agent
from streams.live.agents import verify as verify_agent
from streams.live.components import Components
from streams.settings import Settings
from tests.fakes import FakeFM, FakeVM
from tests.unit import test_agents
from tests.unit.test_agents import T0, Sent, proposals, put, run, table_data
from tests.unit.test_embed_agent import run_embed, verified

POISON = 666  #: the item id that makes a monkeypatched step raise


def dead_letters(parts: Components, sent: Sent, prefix: str = "agents-unit") -> list[DeadLetter]:
    return [
        parts.codec.decode(v, DeadLetter) for v in sent.by_topic.get(f"{prefix}.dead-letter", [])
    ]


def sent_as(parts: Components, sent: Sent, topic: str, kind: type) -> list[Any]:
    return [parts.codec.decode(v, kind) for v in sent.by_topic.get(f"agents-unit.{topic}", [])]


# --- verify ---------------------------------------------------------------------------------


def test_verify_agent_dead_letters_only_the_request_whose_verification_raises(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = verify_agent.verify_requests

    def failing(batches: Sequence[ProposalBatch], *args: Any) -> Any:
        if any(POISON in b.item_ids for b in batches):
            raise ValueError("poison request")
        return real(batches, *args)

    monkeypatch.setattr(verify_agent, "verify_requests", failing)

    async def body(app: faust.App, parts: Components, sent: Sent) -> None:
        enc = parts.codec.encode
        msgs = [
            proposals("r1", T0, (1, 2), user=7),
            proposals("bad", T0 + 1, (POISON,), user=8),
            proposals("r3", T0 + 2, (3,), user=7),
        ]
        await put(app, "verify", [enc(m) for m in msgs])
        assert not app.agents["verify"]._crashed.is_set()
        out = sent_as(parts, sent, "verified", ProposalBatch)
        assert [(b.request_id, b.item_ids) for b in out] == [("r1", (1, 2)), ("r3", (3,))]
        (dl,) = dead_letters(parts, sent)
        assert dl.reason == "processing_error" and "poison request" in dl.error
        assert dl.raw_value == enc(msgs[1])
        assert table_data(app, "ledger")[7]["requests"] == ["r1", "r3"]
        assert 8 not in table_data(app, "ledger")

    run(body, monkeypatch)


def test_verify_agent_dead_letters_a_request_whose_verified_message_cannot_be_encoded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The refused request's pairs stay out of the ledger: the user's next request in the same
    batch verifies them again."""
    real = verify_step.verified_batch

    def broken(b: ProposalBatch, *args: Any) -> ProposalBatch:
        out = real(b, *args)
        return dataclasses.replace(out, candidates=-1) if b.request_id == "bad" else out

    monkeypatch.setattr(verify_step, "verified_batch", broken)

    async def body(app: faust.App, parts: Components, sent: Sent) -> None:
        enc = parts.codec.encode
        msgs = [
            proposals("r1", T0, (1, 2)),
            proposals("bad", T0 + 1, (3,)),
            proposals("r3", T0 + 2, (3, 4)),
        ]
        await put(app, "verify", [enc(m) for m in msgs])
        assert not app.agents["verify"]._crashed.is_set()
        out = sent_as(parts, sent, "verified", ProposalBatch)
        assert [(b.request_id, b.item_ids) for b in out] == [("r1", (1, 2)), ("r3", (3, 4))]
        (dl,) = dead_letters(parts, sent)
        assert dl.reason == "processing_error" and "candidates" in dl.error
        assert dl.raw_value == enc(msgs[1])
        assert table_data(app, "ledger")[7]["requests"] == ["r1", "r3"]

    run(body, monkeypatch)


class NanVM(FakeVM):
    """Scores the poison item NaN (a broken VM output)."""

    def score(self, user_ids: Any, item_ids: Any, event_time_ms: Any) -> np.ndarray:
        s = super().score(user_ids, item_ids, event_time_ms)
        s[item_ids == POISON] = np.nan
        return s


def test_verify_agent_drops_pairs_with_a_nonfinite_vm_score_and_keeps_the_rest(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Nothing valid is lost: the request's other pairs and the other requests are verified;
    the warning counts the dropped pairs and names only the users they were for."""
    monkeypatch.setenv("SOLARIS_VERIFIER_TOP_FRACTION", "1.0")  # the VM keeps every pair
    monkeypatch.setattr(test_agents, "EngineModels", lambda fm: EngineModels(fm, vm=NanVM()))

    async def body(app: faust.App, parts: Components, sent: Sent) -> None:
        assert parts.stages.verifier is not None
        enc = parts.codec.encode
        msgs = [
            proposals("r1", T0, (1, POISON, 2), user=7),
            proposals("r2", T0 + 1, (POISON,), user=8),
            proposals("r3", T0 + 2, (3,), user=9),
        ]
        await put(app, "verify", [enc(m) for m in msgs])
        assert not app.agents["verify"]._crashed.is_set()
        out = sent_as(parts, sent, "verified", ProposalBatch)
        assert [(b.request_id, b.item_ids) for b in out] == [("r1", (1, 2)), ("r3", (3,))]
        assert all(np.isfinite(b.scores).all() for b in out)
        assert dead_letters(parts, sent) == []
        ledger = table_data(app, "ledger")
        assert sorted(LEDGER.load(ledger[7]).pairs) == [1, 2]  # the NaN pair not recorded
        assert 8 not in ledger

    with caplog.at_level("WARNING", logger="streams.live.agents.verify"):
        run(body, monkeypatch)
    (warning,) = [r.getMessage() for r in caplog.records if "non-finite" in r.getMessage()]
    assert warning == "dropped 2 pairs with a non-finite VM score (users [7, 8])"


# --- speculate ------------------------------------------------------------------------------


def test_speculate_agent_dead_letters_only_the_request_whose_step_raises(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = speculate_steps.request_step

    def failing(rec: RequestEvent, *args: Any) -> Any:
        if POISON in rec.candidates:
            raise RuntimeError("speculation blew up")
        return real(rec, *args)

    monkeypatch.setattr(speculate_steps, "request_step", failing)

    async def body(app: faust.App, parts: Components, sent: Sent) -> None:
        enc = parts.codec.encode
        reqs = [
            RequestEvent("a", 7, T0, "feed", (1, 2)),
            RequestEvent("bad", 8, T0 + 1, "feed", (POISON,)),
            RequestEvent("c", 7, T0 + 2, "feed", (3,)),
        ]
        await put(app, "speculate", [enc(r) for r in reqs])
        assert not app.agents["speculate"]._crashed.is_set()
        out = sent_as(parts, sent, "speculated", ProposalBatch)
        assert [(b.request_id, b.item_ids) for b in out] == [("a", (1, 2)), ("c", (3,))]
        (dl,) = dead_letters(parts, sent)
        assert dl.reason == "processing_error" and "speculation blew up" in dl.error
        assert dl.raw_value == enc(reqs[1])

    run(body, monkeypatch)


# --- aggregate ------------------------------------------------------------------------------


def embeddings(rid: str, user: int, t: int, version: str, dim: int, item: int) -> EmbeddingBatch:
    vec = np.full(dim, 0.5, np.float16).tobytes()
    return EmbeddingBatch(rid, user, t, version, "FLOAT16", dim, (item,), vec)


def test_aggregate_agent_dead_letters_only_the_message_whose_step_raises(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = RollingAggregator.add

    def failing(self: RollingAggregator, state: AggregateState, embs: Any) -> Any:
        assert isinstance(embs, EmbeddingBatch), "the agent hands over the FM's message whole"
        if POISON in embs.item_ids:
            raise RuntimeError("aggregation blew up")
        return real(self, state, embs)

    monkeypatch.setattr(RollingAggregator, "add", failing)

    async def body(app: faust.App, parts: Components, sent: Sent) -> None:
        enc = parts.codec.encode
        v = parts.models.fm.model_version
        msgs = [
            embeddings("a", 7, T0, v, 4, 10),
            embeddings("bad", 8, T0 + 1, v, 4, POISON),
            embeddings("c", 9, T0 + 2, v, 4, 11),
        ]
        await put(app, "aggregate", [enc(m) for m in msgs])
        assert not app.agents["aggregate"]._crashed.is_set()
        assert sorted(parts.aggregate_times) == [7, 9]
        assert sorted(table_data(app, "aggregates")) == [7, 9]
        (dl,) = dead_letters(parts, sent)
        assert dl.reason == "processing_error" and "aggregation blew up" in dl.error
        assert dl.raw_value == enc(msgs[1])

    run(body, monkeypatch)


def test_aggregate_agent_refuses_an_embedding_whose_dim_is_not_its_models(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Of the worker's own FM version, only that FM's dim is accepted (a new user's first
    message too); another version is accepted as today (an FM upgrade: it restarts buckets)."""

    async def body(app: faust.App, parts: Components, sent: Sent) -> None:
        enc = parts.codec.encode
        v, dim = parts.models.fm.model_version, parts.models.fm.dim
        assert dim == 4
        msgs = [
            embeddings("wrong", 5, T0, v, 16, 10),
            embeddings("ok", 6, T0 + 1, v, dim, 10),
            embeddings("upgrade", 9, T0 + 2, "another-fm", 16, 10),
        ]
        await put(app, "aggregate", [enc(m) for m in msgs])
        (dl,) = dead_letters(parts, sent)
        assert dl.reason == "processing_error" and dl.raw_value == enc(msgs[0])
        assert "dim 16" in dl.error and f"outputs {dim}" in dl.error
        assert sorted(parts.aggregate_times) == [6, 9]
        assert 5 not in table_data(app, "aggregates")

    run(body, monkeypatch)


# --- embed ----------------------------------------------------------------------------------

EMBED = Settings(topic_prefix="embed-unit", agent_sends="faust", embed_batch_size=64)
#: first item of request r3 and of request r6 of ``verified(10)``
INF_ITEM, NAN_ITEM = 100 + 3 * 13, 100 + 6 * 13


class NonFiniteFM(FakeFM):
    """Overflows float16 for one pair (1e9 stored as float16 is inf) and gives NaN for another."""

    def embed(self, user_ids: Any, item_ids: Any, t: Any, histories: Any) -> Any:
        emb, logits = super().embed(user_ids, item_ids, t, histories)
        emb = emb.copy()
        emb[item_ids == INF_ITEM] = 1e9
        emb[item_ids == NAN_ITEM, 0] = np.nan
        return emb, logits


#: numpy warns when the cast to float16 overflows; the test config makes warnings errors, a
#: worker does not (the check after the FM must catch it, not the warning)
OVERFLOW_WARNS = pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")


def handled(n: int) -> Any:
    """``until`` for ``run_embed``: ``n`` messages embedded or dead-lettered, or a crash."""

    def done(agent: Any, sent: Sent) -> bool:
        topics = sent.by_topic
        out = len(topics.get("embed-unit.embeddings", [])) + len(
            topics.get("embed-unit.dead-letter", [])
        )
        return agent._crashed.is_set() or out >= n

    return done


def reference(msgs: list[ProposalBatch]) -> tuple[list[EmbeddingBatch], InMemoryStore]:
    """The ``embeddings`` messages and stored pairs of ``msgs``, one message at a time."""
    store, embedder, want = InMemoryStore(), Embedder(FakeFM(4)), []
    for m in msgs:
        it = embed_input(None, m)
        mine = embedder.embed(it.pairs, it.histories)
        store.write_pairs(mine, EMBED.pair_ttl_ms)
        want.append(embedding_batch(m, mine))
    return want, store


def check_embedded(parts: Components, sent: Sent, good: list[ProposalBatch]) -> None:
    """Exactly ``good`` were sent (in input order) and stored, nothing else."""
    want, ref = reference(good)
    got = [parts.codec.decode(v, EmbeddingBatch) for v in sent.by_topic["embed-unit.embeddings"]]
    assert got == want
    store = parts.store
    assert isinstance(store, InMemoryStore)
    assert {k: v for k, (_, v) in store._data.items()} == {k: v for k, (_, v) in ref._data.items()}


@OVERFLOW_WARNS
def test_embed_agent_dead_letters_a_message_whose_fm_output_is_not_finite(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    msgs = verified(10)
    codec = Components(EMBED, EngineModels(FakeFM(4)), InMemoryStore()).codec
    values = [codec.encode(m) for m in msgs]
    sent, parts, _ = run_embed(EMBED, values, monkeypatch, fm=NonFiniteFM(4), until=handled(10))
    dls = dead_letters(parts, sent, "embed-unit")
    assert [d.raw_value for d in dls] == [values[3], values[6]]
    assert all(d.reason == "processing_error" and "not finite" in d.error for d in dls)
    assert "'r3'" in dls[0].error and str(INF_ITEM) in dls[0].error
    check_embedded(parts, sent, [m for n, m in enumerate(msgs) if n not in (3, 6)])


def test_embed_agent_dead_letters_a_message_that_cannot_be_encoded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A data fault in the send phase: that message only, nothing of it stored."""
    real = embed_agent.embedding_batch

    def broken(b: ProposalBatch, mine: Sequence[PairEmbedding]) -> EmbeddingBatch:
        out = real(b, mine)
        return dataclasses.replace(out, model_version="") if b.request_id == "r4" else out

    monkeypatch.setattr(embed_agent, "embedding_batch", broken)
    msgs = verified(10)
    codec = Components(EMBED, EngineModels(FakeFM(4)), InMemoryStore()).codec
    values = [codec.encode(m) for m in msgs]
    sent, parts, _ = run_embed(EMBED, values, monkeypatch, until=handled(10))
    (dl,) = dead_letters(parts, sent, "embed-unit")
    assert dl.reason == "processing_error" and dl.raw_value == values[4]
    assert "model_version" in dl.error
    check_embedded(parts, sent, msgs[:4] + msgs[5:])


@OVERFLOW_WARNS
def test_embed_isolating_fails_only_the_message_with_nonfinite_output() -> None:
    msgs = verified(6)
    items = [embed_input(n, m) for n, m in enumerate(msgs)]
    embedder = Embedder(NonFiniteFM(4))
    calls = []

    async def fm(group: list[EmbedInput[Any]]) -> list[PairEmbedding]:
        calls.append(len(group))
        return embedder.embed_messages([it.batch for it in group], [it.history for it in group])

    out = asyncio.run(embed_isolating(items, fm))
    assert calls == [6]  # the FM is not re-run to find the message
    assert [it.event for it, _ in out.done] == [0, 1, 2, 4, 5]
    ((it, exc),) = out.failed
    assert it.event == 3 and isinstance(exc, ValueError) and "not finite" in str(exc)
    assert FakeFM.model_version in str(exc)


def test_a_model_that_fails_on_every_message_is_unavailable_not_bad_data() -> None:
    """Issue 24, item 2: a GPU or runtime failure must not dead-letter good messages."""
    from models.errors import InferenceError, InputError
    from streams.engine.steps.embed import ModelUnavailable

    items = [embed_input(n, m) for n, m in enumerate(verified(4))]

    async def down(group: list[EmbedInput[Any]]) -> list[PairEmbedding]:
        raise InferenceError("fm.onnx: inference failed: CUDA error")

    with pytest.raises(ModelUnavailable, match="all 4 messages"):
        asyncio.run(embed_isolating(items, down))
    with pytest.raises(ModelUnavailable, match="all 1 messages"):
        asyncio.run(embed_isolating(items[:1], down))

    async def bad_input(group: list[EmbedInput[Any]]) -> list[PairEmbedding]:
        raise InputError("history too long")

    out = asyncio.run(embed_isolating(items, bad_input))  # the data's fault: each reported
    assert len(out.failed) == 4 and not out.done

    embedder = Embedder(FakeFM(4))

    async def one_poison(group: list[EmbedInput[Any]]) -> list[PairEmbedding]:
        if any(it.event == 2 for it in group):
            raise InferenceError("fm.onnx: inference failed on this input")
        return embedder.embed_messages([it.batch for it in group], [it.history for it in group])

    out = asyncio.run(embed_isolating(items, one_poison))  # others succeed: that one is bad
    assert [it.event for it, _ in out.done] == [0, 1, 3]
    assert [it.event for it, _ in out.failed] == [2]

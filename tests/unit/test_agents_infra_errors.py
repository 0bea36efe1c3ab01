"""Errors that are not the message's fault never make a dead letter: a table (RocksDB) read
that fails with OSError, or memory running out, reruns the batch (the batch guard) instead."""

from __future__ import annotations

import asyncio
from typing import Any

import faust
import pytest

from schemas.records import PairEmbedding, ProposalBatch
from streams.engine.embedder import Embedder
from streams.engine.steps.embed import EmbedInput, embed_input, embed_isolating
from streams.live.agents import verify as verify_agent
from streams.live.batch_guard import INFRA_ERRORS
from streams.live.components import Components
from tests.fakes import FakeFM
from tests.unit.test_agent_isolation import verified
from tests.unit.test_agents import T0, Sent, proposals, put, run


@pytest.mark.parametrize("error", [OSError(5, "IO error: rocksdb read"), MemoryError()])
def test_a_failing_table_read_reruns_the_batch_instead_of_dead_lettering(
    monkeypatch: pytest.MonkeyPatch, error: BaseException
) -> None:
    real = verify_agent.read_table
    calls: list[Any] = []

    def flaky(table: Any, key: Any) -> Any:
        calls.append(key)
        if len(calls) == 1:
            raise error
        return real(table, key)

    monkeypatch.setattr(verify_agent, "read_table", flaky)

    async def body(app: faust.App, parts: Components, sent: Sent) -> None:
        await put(app, "verify", [parts.codec.encode(proposals("r1", T0, (1, 2)))])
        assert "agents-unit.dead-letter" not in sent.by_topic, "a good message was dead-lettered"
        out = sent.by_topic["agents-unit.verified"]
        assert [parts.codec.decode(v, ProposalBatch).item_ids for v in out] == [(1, 2)]
        assert len(calls) >= 2  # the whole batch ran again and read its tables again

    run(body, monkeypatch)


def test_infrastructure_errors_include_the_machines_own() -> None:
    assert OSError in INFRA_ERRORS  # RocksDB's errors, a full disk, ConnectionError
    assert MemoryError in INFRA_ERRORS


def test_memory_running_out_in_a_fold_reruns_the_aggregate_batch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The aggregate agent isolates each message's fold, but the worker's own errors (memory,
    the disk) are not the message's: no dead letter, the batch runs again."""
    from streams.engine.aggregator import AggregateState, RollingAggregator
    from tests.unit.test_agent_isolation import dead_letters, embeddings

    real = RollingAggregator.add
    calls: list[int] = []

    def once_out_of_memory(self: RollingAggregator, state: AggregateState, embs: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:
            raise MemoryError
        return real(self, state, embs)

    monkeypatch.setattr(RollingAggregator, "add", once_out_of_memory)

    async def body(app: faust.App, parts: Components, sent: Sent) -> None:
        v = parts.models.fm.model_version
        await put(app, "aggregate", [parts.codec.encode(embeddings("a", 7, T0, v, 4, 10))])
        assert dead_letters(parts, sent) == []
        assert sorted(parts.aggregate_times) == [7] and len(calls) == 2

    run(body, monkeypatch)


def test_a_vm_outage_reruns_the_verify_batch_and_a_vm_poison_is_dead_lettered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The VM failing on every message, and on a probe, is the VM's outage: the batch runs
    again (it dead-lettered every message before). Failing on one request only, while the
    probe scores, is that request's fault: it alone is dead-lettered."""
    from models.errors import InferenceError

    real = verify_agent.verify_requests
    state = {"down": 3}  # the batch's call, the message alone, the probe

    def flaky_vm(batches: Any, *args: Any) -> Any:
        if state["down"] > 0:
            state["down"] -= 1
            raise InferenceError("vm.onnx: inference failed: CUDA error")
        if any(b.request_id == "bad" for b in batches):
            raise InferenceError("vm.onnx: inference failed on this input")
        return real(batches, *args)

    monkeypatch.setattr(verify_agent, "verify_requests", flaky_vm)

    async def body(app: faust.App, parts: Components, sent: Sent) -> None:
        enc = parts.codec.encode
        await put(app, "verify", [enc(proposals("r1", T0, (1, 2)))])
        assert "agents-unit.dead-letter" not in sent.by_topic, "an outage dead-lettered data"
        assert len(sent.by_topic["agents-unit.verified"]) == 1 and state["down"] == 0
        await put(app, "verify", [enc(proposals("bad", T0 + 5, (3,), user=8))])
        (dl,) = sent.by_topic["agents-unit.dead-letter"]
        assert b"failed on this input" in dl
        assert not app.agents["verify"]._crashed.is_set()

    run(body, monkeypatch)


def test_a_poison_message_alone_in_its_group_is_its_own_fault_not_an_outage() -> None:
    """Quiet traffic makes groups of one: a message the model fails on, alone, read as an
    outage (ModelUnavailable: the batch rerun until the worker exited, again and again). A
    probe the working model embeds tells the two apart."""
    from models.errors import InferenceError

    items = [embed_input(n, m) for n, m in enumerate(verified(3))]
    embedder = Embedder(FakeFM(4))
    groups: list[list[Any]] = []

    async def poisoned(group: list[EmbedInput[Any]]) -> list[PairEmbedding]:
        groups.append([it.event for it in group])
        if any(it.event in (0, 1) for it in group):
            raise InferenceError("fm.onnx: inference failed on this input")
        return embedder.embed_messages([it.batch for it in group], [it.history for it in group])

    out = asyncio.run(embed_isolating(items[:1], poisoned))
    assert [it.event for it, _ in out.failed] == [0] and not out.done
    assert groups == [[0], [None]]  # the message, then the probe (event None)
    out = asyncio.run(embed_isolating(items[:2], poisoned))  # two poison letters together
    assert [it.event for it, _ in out.failed] == [0, 1] and not out.done

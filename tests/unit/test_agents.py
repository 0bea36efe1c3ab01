"""Agent adapters under Faust's ``test_context`` (no Kafka: topic sends and table changelogs
are captured in memory; tables use ``memory://``)."""

from __future__ import annotations

import asyncio
import collections
import time
import warnings
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import faust
import faust.tables.base
import pytest

from schemas.records import DeadLetter, ImpressionEvent, ProposalBatch, RequestEvent
from store.memory import InMemoryStore
from streams.engine.models import EngineModels
from streams.engine.state import LEDGER
from streams.live.app import create_app
from streams.live.components import Components
from streams.settings import Settings
from tests.fakes import FakeFM

T0 = 1_700_000_000_000
ROLES = ["history", "speculate", "verify", "aggregate"]


class Delivered(asyncio.Future[None]):
    """A changelog delivery that has already succeeded: awaitable, as the agents' ``settle``
    awaits it (a plain namespace crashed the agent there after its first batch, so a run whose
    messages were split into two batches under load never processed the second), and carrying
    the ``message.partition`` Faust reads."""

    def __init__(self, partition: int) -> None:
        super().__init__(loop=asyncio.get_running_loop())
        self.message = SimpleNamespace(partition=partition)
        self.set_result(None)


class Sent:
    """What the agents sent, per topic; ``fail_on`` makes deliveries to a topic fail."""

    def __init__(self) -> None:
        self.by_topic: dict[str, list[bytes]] = {}
        self.fail_on: str | None = None
        #: (table, key) -> changelog partition of the last write
        self.changelog: dict[tuple[str, Any], int] = {}
        #: (table, key) -> how many changelog writes
        self.writes: collections.Counter[tuple[str, Any]] = collections.Counter()

    def send_changelog(self, table: Any, partition: int, key: Any, value: Any, *_: Any) -> Any:
        self.changelog[(table.name, key)] = partition
        self.writes[(table.name, key)] += 1
        return Delivered(partition)

    async def send(self, topic: Any, key: Any = None, value: Any = None, **_: Any) -> Any:
        name = topic.get_topic_name()
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if name.endswith(self.fail_on or "\0"):
            fut.set_exception(RuntimeError("delivery failed"))
        else:
            self.by_topic.setdefault(name, []).append(value)
            fut.set_result(None)
        return fut


def close_current_loop() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            current = asyncio.get_event_loop_policy().get_event_loop()
        except RuntimeError:  # none set
            return
    if not current.is_running():
        current.close()


def run(
    body: Callable[[faust.App, Components, Sent], Any],
    monkeypatch: pytest.MonkeyPatch,
    **overrides: Any,
) -> Any:
    sent = Sent()
    monkeypatch.setattr(faust.Topic, "send", lambda self, **kw: sent.send(self, **kw))
    monkeypatch.setattr(
        faust.tables.base.Collection,
        "send_changelog",
        lambda table, partition, key, value, *_, **__: sent.send_changelog(
            table, partition, key, value
        ),
    )
    close_current_loop()  # one a library made implicitly would leak when replaced
    loop = asyncio.new_event_loop()  # Faust binds to the current loop: one per test, closed
    asyncio.set_event_loop(loop)
    settings = Settings(topic_prefix="agents-unit", agent_sends="faust", **overrides)
    parts = Components(settings, EngineModels(FakeFM(4)), InMemoryStore())
    app = create_app(settings, ROLES, parts, store="memory://")
    app.finalize()
    app.flow_control.resume()
    try:
        return loop.run_until_complete(body(app, parts, sent))
    finally:
        close_test_loops(loop, app)


def close_test_loops(loop: asyncio.AbstractEventLoop, app: faust.App) -> None:
    """Close a test's event loop and the one Faust's consumer made for a thread it never
    started (no broker here): left open, their sockets fail a later test as ResourceWarnings."""
    loop.run_until_complete(loop.shutdown_asyncgens())
    loop.close()
    asyncio.set_event_loop(None)
    thread = getattr(app.__dict__.get("_consumer"), "_thread", None)
    thread_loop = getattr(thread, "thread_loop", None)
    if thread_loop is not None:
        thread_loop.close()


async def put(
    app: faust.App,
    agent: str,
    values: list[bytes],
    key: bytes = b"7",
    partitions: list[int] | None = None,
) -> None:
    async with app.agents[agent].test_context() as ctx:
        events = [
            await ctx.put(value, key=key, partition=partitions[n] if partitions else 0)
            for n, value in enumerate(values)
        ]
        await asyncio.sleep(0.3)  # a batch is taken within agent_batch_max_wait_ms
        # then until the batch is done: Faust acks a batch's events when its body returns (a
        # fixed wait alone failed once on a loaded machine: the output was not sent yet)
        deadline = time.monotonic() + ACK_WAIT_S
        while time.monotonic() < deadline and not app.agents[agent]._crashed.is_set():
            if all(e.message.acked for e in events):
                break
            await asyncio.sleep(0.02)


#: the longest a test waits for an agent's batch to finish (it returns as soon as it has)
ACK_WAIT_S = 10.0


def table_data(app: faust.App, name: str) -> Any:
    """A ``memory://`` table's stored values (key -> value)."""
    return app.tables[name].data  # type: ignore[attr-defined]


def proposals(rid: str, t: int, items: tuple[int, ...], user: int = 7) -> ProposalBatch:
    return ProposalBatch(rid, user, t, len(items), items, ("candidates",) * len(items))


def test_verify_agent_sends_then_saves_the_ledger_and_skips_redeliveries(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def body(app: faust.App, parts: Components, sent: Sent) -> None:
        enc = parts.codec.encode
        await put(
            app, "verify", [enc(proposals("r1", T0, (1, 2))), enc(proposals("r2", T0 + 1, (2, 3)))]
        )
        await put(app, "verify", [enc(proposals("r1", T0, (1, 2)))])  # a redelivery
        out = [parts.codec.decode(v, ProposalBatch) for v in sent.by_topic["agents-unit.verified"]]
        assert [b.item_ids for b in out] == [(1, 2), (3,)]
        saved = LEDGER.load(table_data(app, "ledger")[7])
        assert saved.requests == ["r1", "r2"] and sorted(saved.pairs) == [1, 2, 3]

    run(body, monkeypatch)


def test_verify_agent_keeps_the_ledger_when_the_delivery_fails(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def body(app: faust.App, parts: Components, sent: Sent) -> None:
        sent.fail_on = "verified"
        await put(app, "verify", [parts.codec.encode(proposals("r1", T0, (1, 2)))])
        assert app.agents["verify"]._crashed  # Faust restarts it and the batch is redelivered
        assert 7 not in table_data(app, "ledger")  # re-verified after the restart, not skipped

    run(body, monkeypatch)


def test_requests_agent_dead_letters_events_from_the_future(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def body(app: faust.App, parts: Components, sent: Sent) -> None:
        enc = parts.codec.encode
        year_2100 = 4_102_444_800_000
        await put(
            app,
            "speculate",
            [
                enc(RequestEvent("r1", 7, T0, "feed", (1, 2))),
                enc(RequestEvent("r2", 7, year_2100, "feed", (3,))),
            ],
        )
        (dl,) = [
            parts.codec.decode(v, DeadLetter) for v in sent.by_topic["agents-unit.dead-letter"]
        ]
        assert dl.reason == "future_event_time"
        (spec,) = [
            parts.codec.decode(v, ProposalBatch) for v in sent.by_topic["agents-unit.speculated"]
        ]
        assert spec.request_id == "r1"

    run(body, monkeypatch)


@pytest.mark.parametrize("rule", ["wall", "partition"])
def test_partition_event_clock_dead_letters_events_far_ahead_of_a_replay(
    monkeypatch: pytest.MonkeyPatch, rule: str
) -> None:
    """Replaying old traffic, a request dated a week after the replay's time (but before now)
    is refused only by ``SOLARIS_EVENT_CLOCK=partition``."""
    week = 7 * 24 * 3_600_000

    async def body(app: faust.App, parts: Components, sent: Sent) -> None:
        enc = parts.codec.encode
        reqs = [
            RequestEvent("r1", 7, T0, "feed", (1, 2)),
            RequestEvent("r2", 7, T0 + week, "feed", (3,)),
        ]
        await put(app, "speculate", [enc(r) for r in reqs])
        dead = sent.by_topic.get("agents-unit.dead-letter", [])
        dls = [parts.codec.decode(v, DeadLetter) for v in dead]
        speculated = [
            parts.codec.decode(v, ProposalBatch).request_id
            for v in sent.by_topic["agents-unit.speculated"]
        ]
        if rule == "partition":
            assert [d.reason for d in dls] == ["future_event_time"] and speculated == ["r1"]
        else:
            assert dls == [] and speculated == ["r1", "r2"]

    run(body, monkeypatch, event_clock=rule)


def test_batched_table_state_is_read_and_written_in_each_events_partition(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Faust tables use the *current* event's partition; in a batch that must be each event's
    own, not the batch's last (else user 7's ledger lands in user 8's partition)."""

    async def body(app: faust.App, parts: Components, sent: Sent) -> None:
        enc = parts.codec.encode
        batches = [enc(proposals("a", T0, (1,), user=7)), enc(proposals("b", T0, (2,), user=8))]
        await put(app, "verify", batches, partitions=[1, 3])
        assert sent.changelog[("ledger", 7)] == 1 and sent.changelog[("ledger", 8)] == 3

    run(body, monkeypatch)


def test_history_is_written_once_per_user_and_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each user's state is one changelog write per batch (not one per event), in event order."""

    async def body(app: faust.App, parts: Components, sent: Sent) -> None:
        enc = parts.codec.encode
        imps = [ImpressionEvent("r", 7, item, T0 + item, 0, item % 2) for item in (3, 1, 2)]
        await put(app, "history", [enc(i) for i in imps])
        assert table_data(app, "history")[7] == [[1, 1, T0 + 1], [2, 0, T0 + 2], [3, 1, T0 + 3]]
        assert sent.writes[("history", 7)] == 1

    run(body, monkeypatch, agent_batch_max_wait_ms=200)  # one batch even on a busy machine


def test_ledger_is_written_once_per_user_and_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    async def body(app: faust.App, parts: Components, sent: Sent) -> None:
        enc = parts.codec.encode
        await put(
            app, "verify", [enc(proposals("r1", T0, (1, 2))), enc(proposals("r2", T0 + 1, (3,)))]
        )
        assert table_data(app, "ledger")[7]["requests"] == ["r1", "r2"]
        assert sent.writes[("ledger", 7)] == 1

    run(body, monkeypatch, agent_batch_max_wait_ms=200)  # one batch even on a busy machine


def test_a_failed_event_leaves_its_users_batch_state_as_before(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The event that raises is dead-lettered; the user's other events of the batch are kept,
    and what the failed one had half-applied is not."""
    from streams.live.agents import history as history_agent

    real = history_agent.observe_impression

    def failing(entries: list[Any], imp: ImpressionEvent, *args: Any) -> Any:
        if imp.item_id == 666:
            entries.append((666, 1, imp.event_time_ms))  # half-applied, then fails
            raise ValueError("bad impression")
        return real(entries, imp, *args)

    monkeypatch.setattr(history_agent, "observe_impression", failing)

    async def body(app: faust.App, parts: Components, sent: Sent) -> None:
        enc = parts.codec.encode
        items = (1, 666, 2)
        await put(
            app,
            "history",
            [enc(ImpressionEvent("r", 7, i, T0 + n, 0, 1)) for n, i in enumerate(items)],
        )
        assert [e[0] for e in table_data(app, "history")[7]] == [1, 2]
        (dl,) = [
            parts.codec.decode(v, DeadLetter) for v in sent.by_topic["agents-unit.dead-letter"]
        ]
        assert dl.reason == "processing_error" and "bad impression" in dl.error

    run(body, monkeypatch)


def test_proposal_counters_match_the_speculated_pairs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Counted once per strategy and batch, the counters still add up to every proposal sent."""
    from prometheus_client import REGISTRY

    def total() -> dict[str, float]:
        return {
            s.labels["strategy"]: s.value
            for m in REGISTRY.collect()
            if m.name == "solaris_proposals"
            for s in m.samples
            if s.name == "solaris_proposals_total"
        }

    async def body(app: faust.App, parts: Components, sent: Sent) -> None:
        enc = parts.codec.encode
        before = total()
        reqs = [RequestEvent(f"r{n}", 7 + n % 2, T0 + n, "feed", (1, 2, 3 + n)) for n in range(4)]
        await put(app, "speculate", [enc(r) for r in reqs])
        out = [
            parts.codec.decode(v, ProposalBatch) for v in sent.by_topic["agents-unit.speculated"]
        ]
        want = collections.Counter(s for b in out for s in b.strategies)
        after = total()
        assert want and {s: after[s] - before.get(s, 0.0) for s in want} == dict(want)

    run(body, monkeypatch)


def test_pending_counters_are_flushed_when_the_worker_shuts_down(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The 1 s counter timer stops with the app; the last second's counts are published by the
    shutdown hook (a drained worker stopped right after its last batch used to lose them)."""

    async def body(app: faust.App, parts: Components, sent: Sent) -> None:
        flushed: list[bool] = []
        monkeypatch.setattr(parts, "flush_counts", lambda: flushed.append(True))
        await app.on_before_shutdown.send()
        assert flushed == [True]

    run(body, monkeypatch)

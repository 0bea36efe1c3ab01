"""The offline simulator: every engine step in-process, over recorded traffic in event-time order.

Per request (at event time t): neighbour refresh when due -> the ranker's lookup (before anything
this request causes, so a request never serves itself) -> speculate -> verify -> embed with the
history known before t -> write pairs and the user's FM state (state tier) -> update the user's
aggregate. Per impression: history,
look-ahead counts, labelled coverage, and (test period) evaluation rows.

The store is in-memory with an *event-time* clock by default, or any FeatureStore (e.g. Redis).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from schemas.records import ImpressionEvent, RequestEvent
from store.history_values import encode_history
from store.memory import InMemoryStore
from store.protocol import FeatureStore
from store.reader import FeatureReader
from streams.engine.aggregator import AggregateState
from streams.engine.coverage import CoverageCounter, SpeculationLedger
from streams.engine.history import HistoryBook
from streams.engine.ledger import Confirmed
from streams.engine.models import EngineModels
from streams.engine.ranker import rank, reads_history
from streams.engine.recurrence import EMPTY_MEMORY, PairMemory
from streams.engine.stages import build_stages
from streams.engine.steps.aggregate import aggregate_step
from streams.engine.steps.embed import EmbedInput, embed_input, nonfinite_output
from streams.engine.steps.expiry import EXPIRING_TABLES, dead_states
from streams.engine.steps.history import observe_impression
from streams.engine.steps.neighbours import NeighbourState, neighbours_step
from streams.engine.steps.speculate import SavedRep, SpeculateInputs, speculate_step
from streams.engine.steps.state import computed_states, user_states
from streams.engine.steps.verify import LedgerState, verify_requests
from streams.simulate.config import SimConfig
from streams.simulate.evaluation import EvalRows
from streams.simulate.latency import DelayedPipeline, DelaySchedule

log = logging.getLogger(__name__)

#: the simulated ranker's read deadline (ms): never reached by an in-memory store
OFFLINE_DEADLINE_MS = 3_600_000.0
#: the table-expiry sweep runs at most once per this much event time (and once per grace)
SWEEP_EVERY_MIN_MS = 3_600_000


class Simulator:
    """Feed events with :meth:`run`; read results from the counters or :meth:`summary`."""

    def __init__(
        self,
        config: SimConfig,
        models: EngineModels,
        store: FeatureStore | None = None,
        delays: DelaySchedule | None = None,
    ) -> None:
        """``delays``: apply each event's pipeline work that late in event time (the ranker's
        reads stay on time; :mod:`streams.simulate.latency`); None = lockstep."""
        self.config = config
        self.delayed = DelayedPipeline(delays) if delays is not None else None
        self.models = models
        self.now_ms = 0
        self.store = store if store is not None else InMemoryStore(clock_ms=lambda: self.now_ms)
        # no wall-clock deadline offline: a lookup that a loaded machine slows past the ranker's
        # 20 ms would serve *missing* and make the run depend on the machine's load
        offline = dataclasses.replace(config.reader, deadline_ms=OFFLINE_DEADLINE_MS)
        self.reader = FeatureReader(self.store, offline, states=models.state)
        self.history = HistoryBook(capacity=2 * config.history_len)
        #: vm_solaris computes streaming user features: keep each user's history in the store
        self.store_histories = reads_history(models.solaris)
        self.stages = build_stages(
            config.speculator,
            config.verifier,
            models,
            config.aggregate_window_ms,
            config.aggregate_bucket_ms,
            verify=config.verify,
            use_neighbours=config.use_neighbours,
            aggregate_max_keys=config.engine.aggregate_max_keys,
        )
        self.lookahead = self.stages.lookahead
        self.verifier = self.stages.verifier
        self.aggregator = self.stages.aggregator
        self.reps = self.stages.reps
        self.knobs = config.engine.verify_knobs()
        self.saved_reps: dict[int, SavedRep] = {}
        #: each user's pair memory (live: the ``recent`` table)
        self.pair_memory: dict[int, PairMemory] = {}
        self.ledgers: dict[int, LedgerState] = {}
        self.agg_states: dict[int, AggregateState] = {}
        self.neighbours = (
            NeighbourState.new(config.engine, self.reps) if self.reps is not None else None
        )
        self.requests = 0
        #: verified messages whose FM output was not finite (live: dead-lettered)
        self.refused_outputs = 0
        self.coverage = CoverageCounter()
        self.labelled = CoverageCounter()
        self.speculation = SpeculationLedger(horizon_ms=2 * config.pair_ttl_ms)
        self.eval = EvalRows(config.reader.dim) if config.test_start_ms is not None else None
        self.read_ms: list[float] = []
        self._pending: dict[str, tuple[int, dict[int, int], np.ndarray, np.ndarray]] = {}
        #: event time of the last table-expiry sweep; users deleted by it, per table
        self._swept_at = 0
        self.expired: dict[str, int] = dict.fromkeys(EXPIRING_TABLES, 0)

    def run(
        self,
        events: Iterable[RequestEvent | ImpressionEvent],
        progress: Callable[[int], None] | None = None,
    ) -> None:
        """Process ``events`` (event-time order); ``progress`` is called with events done so far."""
        for n, event in enumerate(events, 1):
            if isinstance(event, RequestEvent):
                self.on_request(event)
            else:
                self.on_impression(event)
            if progress is not None and n % 2048 == 0:
                progress(n)
                self._prune_pending()
        if self.delayed is not None:  # the stream ended: the late pipeline drains
            self.delayed.drain(self._apply)

    def on_request(self, r: RequestEvent) -> None:
        cfg = self.config
        t, u = r.event_time_ms, r.user_id
        if self.delayed is not None:
            self.delayed.run_before(t, self._apply)
        if t < self.now_ms:
            raise ValueError(f"events out of event-time order at request {r.request_id}")
        self.now_ms = t
        self.requests += 1
        res = rank(r, self.reader)
        self.read_ms.append(res.read_ms)
        self.coverage.add(res.tiers)
        self.speculation.on_served(u, res.item_ids, res.ages_ms, res.tiers, t)
        position = {int(item): j for j, item in enumerate(r.candidates)}
        keep_vectors = self.eval is not None and t >= (cfg.test_start_ms or 0)
        self._pending[r.request_id] = (
            t,
            position,
            res.tiers,
            res.vectors if keep_vectors else np.zeros(0),
        )

        # After ranking: what a refresh at t builds may serve only requests later than t.
        self._maybe_refresh_neighbours(t)
        if self.delayed is not None:
            self.delayed.defer(r)
        else:
            self._pipeline(r)

    def _apply(self, event: RequestEvent | ImpressionEvent) -> None:
        """Delayed pipeline work that is now due."""
        if isinstance(event, RequestEvent):
            self._pipeline(event)
        else:
            self._observe(event)

    def _pipeline(self, r: RequestEvent) -> None:
        """The live pipeline's steps for one request, in the order the agents run them."""
        cfg, u = self.config, r.user_id
        self._expire_dead_states(r.event_time_ms)
        ledger = self.ledgers.setdefault(u, LedgerState())
        out = speculate_step(
            [r],
            SpeculateInputs(
                lambda _: ledger.pairs,
                lambda _: self._confirmed(u)(),
                self.history.entries,
                self.saved_reps.get,
                lambda _: self.pair_memory.get(u, EMPTY_MEMORY),
            ),
            self.stages,
            cfg.reader.neighbour_aggregate_ttl_ms,
        )
        for user, rep in out.reps.items():  # item by item: tests record the writes
            self.saved_reps[user] = rep
        for user, memory in out.memories.items():
            self.pair_memory[user] = memory
        if not out.proposals:
            return
        ((_, batch),) = out.proposals
        (res,) = verify_requests(
            [batch],
            lambda _: ledger,
            self.history.entries,
            self.verifier,
            self.knobs,
            self._confirmed,
        )
        if res.ledger is not None:
            self.ledgers[u] = res.ledger
        if res.out is None:
            return
        item = embed_input(None, res.out)
        # the live embed agent's path (message → FM inputs → records) and its output check: a
        # message whose vectors are not finite in the stored dtype is refused whole (live: it
        # is dead-lettered alone) and nothing of it is stored
        embedder = self.stages.embedder
        embeddings, states = embedder.embed_messages_with_states([item.batch], [item.history])
        if nonfinite_output(item, embeddings) is not None:
            self.refused_outputs += 1
            return
        self.store.write_pairs(embeddings, cfg.pair_ttl_ms)
        self._write_state(item, states)
        self.speculation.on_embedded(len(embeddings))
        step = aggregate_step([embeddings], self._agg_state, self.aggregator)
        self.refused_outputs += len(step.refused)
        aggregate = step.aggregates.get(u)
        if aggregate is not None:
            self.store.write_aggregates([aggregate], cfg.aggregate_store_ttl_ms)
            if self.neighbours is not None:
                self.neighbours.saw_aggregate(u, aggregate.event_time_ms)

    def _expire_dead_states(self, t: int) -> None:
        """Delete the users whose ledger, aggregate, saved representation or pair memory can
        change no output any more (:mod:`streams.engine.steps.expiry`), once per grace of event
        time: what the live workers' table sweep does, so memory follows the active users.
        Invisible in every output (``tests/unit/test_table_expiry.py`` compares runs with and without it)."""
        engine = self.config.engine
        every = max(engine.table_expiry_grace_ms, SWEEP_EVERY_MIN_MS)
        if t - self._swept_at < every:
            return
        self._swept_at = t
        tables: dict[str, Any] = {
            "ledger": self.ledgers,
            "aggregates": self.agg_states,
            "reps": self.saved_reps,
            "recent": self.pair_memory,
        }
        for name, states in tables.items():
            for user in dead_states(name, states.items(), t, engine):
                del states[user]
                self.expired[name] += 1

    def _agg_state(self, user: int) -> AggregateState:
        return self.agg_states.setdefault(user, AggregateState())

    def _confirmed(self, user: int) -> Confirmed:
        """The user's embeddings that came back (the aggregate state's record, as live)."""
        return lambda: self.agg_states[user].seen if user in self.agg_states else frozenset()

    def _write_state(self, item: EmbedInput[None], computed: np.ndarray | None) -> None:
        """The user's FM state as of this request, for the state tier (what the live embed
        agent writes after the message's pairs); ``computed``: the state the split FM's run
        computed for the message (None: the state model runs here)."""
        model = self.models.state
        if model is None or not item.n_pairs:
            return
        version, dtype = self.models.fm.model_version, self.stages.embedder.dtype
        if computed is not None:
            states = computed_states([item], computed, version, dtype)
        else:
            states = user_states([item], model.states, version, dtype)
        self.store.write_states(states.values, self.config.reader.state_ttl_ms)

    def on_impression(self, imp: ImpressionEvent) -> None:
        """The impression's pipeline work (history) now or, with delays, when due; its
        labelled coverage and evaluation row now (they describe the read already made; with
        delays the row's history is what the late pipeline knows)."""
        if self.delayed is not None:
            self.delayed.run_before(imp.event_time_ms, self._apply)
            self.delayed.defer(imp)
        else:
            self._observe(imp)
        self._record(imp)

    def _observe(self, imp: ImpressionEvent) -> None:
        """The history step (and the store write the live history agent does for the ranker)."""
        u = imp.user_id
        entries = self.history.mutable(u)
        observe_impression(entries, imp, self.history.capacity, self.lookahead)
        if self.store_histories:
            self.store.write_histories(
                {u: encode_history(entries)}, self.config.history_store_ttl_ms
            )

    def _record(self, imp: ImpressionEvent) -> None:
        u = imp.user_id
        pending = self._pending.get(imp.request_id)
        if pending is None:
            return
        t, position, tiers, vectors = pending
        j = position.get(imp.item_id)
        if j is None:
            return
        self.labelled.add(tiers[j : j + 1])
        if self.eval is not None and len(vectors):
            hist = self.history.before(u, t, self.config.history_len)
            self.eval.add(u, imp.item_id, t, imp.label, int(tiers[j]), vectors[j], hist)

    def _maybe_refresh_neighbours(self, t: int) -> None:
        if self.neighbours is None:
            return
        done = neighbours_step(self.neighbours, t, self.config.engine)
        if done is not None:
            self.store.write_neighbours(done.lists, self.config.reader.neighbour_ttl_ms)
            self.reader.cold_start = done.index

    def _prune_pending(self) -> None:
        horizon = self.now_ms - 3_600_000
        for rid in [rid for rid, p in self._pending.items() if p[0] < horizon]:
            del self._pending[rid]

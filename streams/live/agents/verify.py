"""speculated → verify (one VM call per batch round) → ``verified``; the ledger is saved only
after the batch's deliveries are durable (a crash before re-verifies instead of skipping).

A message whose verification raises, or whose ``verified`` message cannot be encoded (a data
fault), is dead-lettered alone (``processing_error``): the batch is verified again one message
at a time, so the user's later requests do not see the refused one's pairs in the ledger. Pairs
the VM scored NaN or infinite are dropped by the verifier before ranking (counted and logged
here), so the rest of their request goes on.
Infrastructure errors (``INFRA_ERRORS``) propagate to the agent's batch guard, which runs the
whole batch again (the ledger is not saved yet). So does a VM that fails on every message and
on a probe (``ModelUnavailable``): a transient ONNX failure must not dead-letter good messages.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Container
from dataclasses import dataclass
from typing import Any

import faust

from schemas.records import ProposalBatch
from streams.engine.history import Entry
from streams.engine.ledger import Confirmed
from streams.engine.state import aggregate_confirmed
from streams.engine.steps.embed import PROBE_REQUEST, ModelUnavailable, model_fault
from streams.engine.steps.verify import LedgerState, VerifyResult, verify_requests
from streams.live import metrics
from streams.live.agents.context import INFRA_ERRORS, AgentContext, as_current, user_key
from streams.live.offload import MODEL_POOL, in_pool
from streams.live.state import (
    history_from_table,
    ledger_from_table,
    ledger_to_table,
    read_table,
)

log = logging.getLogger(__name__)
Decoded = list[tuple[Any, ProposalBatch]]  #: (Faust event, its record), in stream order
UserState = dict[int, tuple[LedgerState, list[Entry]]]
#: per user, the embeddings that came back (read from the aggregates table when a rule needs it)
Confirmations = dict[int, Container[tuple[int, int]]]


@dataclass(frozen=True, slots=True)
class UserTables:
    """How the agent reads a user's saved state (the verify agent: its tables; the fused
    speculate agent: its batch's state, already read for speculating)."""

    ledger: Callable[[int], LedgerState]
    history: Callable[[int], list[Entry]]
    confirmed: Callable[[int], Container[tuple[int, int]]]


class VerifyAgent:
    def __init__(self, ctx: AgentContext) -> None:
        self.ctx = ctx
        self.ledger, self.history = ctx.tables["ledger"], ctx.tables["history"]
        self.aggregates = ctx.tables["aggregates"]
        self.confirmed: Confirmations = {}

    async def on_batch(self, events: list[Any]) -> None:
        """One batch of ``speculated`` messages."""
        self.confirmed = {}
        decoded, state = await self._load(events)
        await self.verify_decoded(decoded, state)

    async def verify_speculated(self, decoded: Decoded, tables: UserTables) -> None:
        """The fused path (``SOLARIS_FUSE_VERIFY``): verify the proposals the speculate agent
        just made from its batch of requests, with its batch's table state (``tables``: the
        user's ledger, history and confirmations, each read once), then send and save as
        :meth:`on_batch` does. ``decoded`` pairs each proposal batch with its request event."""
        self.confirmed = {}
        state: UserState = {}
        first_ms: dict[int, int] = {}
        for event, b in decoded:
            with as_current(event):  # state read in the request's partition
                self._gather(b, state, first_ms, tables)
        await self.verify_decoded(decoded, state)

    def _gather(
        self, b: ProposalBatch, state: UserState, first_ms: dict[int, int], tables: UserTables
    ) -> None:
        """Read what verifying ``b`` needs of its user, once per user and batch (call inside
        the event's partition)."""
        u = b.user_id
        if u not in state:
            state[u] = (tables.ledger(u), tables.history(u))
            first_ms[u] = b.event_time_ms
        if u not in self.confirmed and self._needs_confirmed(b, state[u][0], first_ms[u]):
            self.confirmed[u] = tables.confirmed(u)

    async def verify_decoded(self, decoded: Decoded, state: UserState) -> None:
        """Verify, send the ``verified`` messages, then save the ledgers (see the module)."""
        if not decoded:
            return
        try:
            results = await in_pool(MODEL_POOL, self._verify, [b for _, b in decoded], state)
            encoded = self._encode(results)
        except INFRA_ERRORS:
            raise
        except Exception:  # isolate the bad message: verify one by one
            decoded, results, encoded = await self._one_by_one(decoded, state)
        self._report_nonfinite(decoded, results)
        await self._send_then_save(decoded, results, encoded)

    def _report_nonfinite(self, decoded: Decoded, results: list[VerifyResult]) -> None:
        """Pairs the verifier dropped for a NaN or infinite VM score (each result says how
        many of its request's): a broken model, loudly."""
        dropped = sum(r.dropped_nonfinite for r in results)
        if dropped:
            hit = zip(decoded, results, strict=True)
            users = sorted({b.user_id for (_, b), r in hit if r.dropped_nonfinite})[:10]
            log.warning(
                "dropped %d pairs with a non-finite VM score (users %s)",
                dropped,
                users,
                extra={"nonfinite_scores": dropped},
            )
            self.ctx.parts.count(nonfinite_scores=dropped)

    async def _load(self, events: list[Any]) -> tuple[Decoded, UserState]:
        decoded: Decoded = []
        state: UserState = {}
        first_ms: dict[int, int] = {}  #: per user, the event time of its first request here
        tables = UserTables(
            lambda u: ledger_from_table(read_table(self.ledger, u)),
            lambda u: history_from_table(read_table(self.history, u)),
            lambda u: aggregate_confirmed(read_table(self.aggregates, u)),
        )
        for event in events:
            b = await self.ctx.admitted(event, ProposalBatch)
            if b is None:
                continue
            self.ctx.parts.table_clocks.saw("ledger", event.message.partition, b.event_time_ms)
            async with self.ctx.processing(event):  # state read in the event's partition
                self._gather(b, state, first_ms, tables)
                decoded.append((event, b))
        return decoded, state

    def _needs_confirmed(self, b: ProposalBatch, led: LedgerState, first_ms: int) -> bool:
        """Whether verifying ``b`` may ask if a mark's vector came back: a saved mark, or one
        this batch's earlier requests of the user make, past the in-flight timeout."""
        knobs = self.ctx.parts.knobs
        if knobs.in_flight_ms >= knobs.refresh_after_ms:
            return False
        oldest = min(led.pairs.values(), default=first_ms)
        return b.event_time_ms - min(oldest, first_ms) >= knobs.in_flight_ms

    def _confirmed_of(self, user: int) -> Confirmed:
        def load() -> Container[tuple[int, int]]:
            try:
                return self.confirmed[user]
            except KeyError:  # _needs_confirmed said no: the rule cannot ask
                raise AssertionError(f"user {user}'s confirmations were not loaded") from None

        return load

    def _verify(self, batches: list[ProposalBatch], state: UserState) -> list[VerifyResult]:
        parts = self.ctx.parts
        return verify_requests(
            batches,
            lambda u: state[u][0],
            lambda u: state[u][1],
            parts.stages.verifier,
            parts.knobs,
            self._confirmed_of,
        )

    def _encode(self, results: list[VerifyResult]) -> list[bytes | None]:
        """Each result's ``verified`` message encoded (None: nothing to send), before anything
        is sent or saved: a record that cannot be encoded fails like its verification."""
        codec = self.ctx.parts.codec
        return [None if r.out is None else codec.encode(r.out) for r in results]

    async def _one_by_one(
        self, decoded: Decoded, state: UserState
    ) -> tuple[Decoded, list[VerifyResult], list[bytes | None]]:
        kept: Decoded = []
        results: list[VerifyResult] = []
        encoded: list[bytes | None] = []
        failed: list[tuple[Any, Exception]] = []
        for event, b in decoded:
            try:
                (res,) = await in_pool(MODEL_POOL, self._verify, [b], state)
                (data,) = self._encode([res])
            except INFRA_ERRORS:
                raise
            except Exception as exc:
                failed.append((event, exc))
                continue
            if res.ledger is not None:  # the user's next request sees this one's pairs
                state[b.user_id] = (res.ledger, state[b.user_id][1])
            kept.append((event, b))
            results.append(res)
            encoded.append(data)
        if failed and not kept and all(model_fault(e) for _, e in failed):
            await self._unless_vm_down(decoded[0][1].event_time_ms, failed[0][1])
        for event, error in failed:
            await self.ctx.dead_for(event, error)
        return kept, results, encoded

    async def _unless_vm_down(self, event_time_ms: int, first: Exception) -> None:
        """Every message failed on the VM itself: run it on a probe any working VM scores (a
        user with no state, one unknown item). If that fails too the VM is down, not the data:
        :class:`ModelUnavailable` reruns the batch instead of dead-lettering all of it."""
        probe = ProposalBatch(PROBE_REQUEST, 0, event_time_ms, 1, (0,), ("probe",))
        try:
            await in_pool(MODEL_POOL, self._verify, [probe], {0: (LedgerState(), [])})
        except INFRA_ERRORS:
            raise
        except Exception as down:
            raise ModelUnavailable(
                f"the VM failed on every message of a batch, each alone, and on a probe: "
                f"{first} (probe: {down})"
            ) from first

    async def _send_then_save(
        self, decoded: Decoded, results: list[VerifyResult], encoded: list[bytes | None]
    ) -> None:
        deliveries = []
        sender = self.ctx.sender
        for (_, b), res, data in zip(decoded, results, encoded, strict=True):
            self._count(b, res)
            if data is not None:
                key = user_key(b.user_id)
                deliveries.append(await sender.send("verified", key, data, b.event_time_ms))
        for delivery in deliveries:
            await delivery
        last: dict[int, tuple[Any, LedgerState]] = {}  # a user's later results carry the earlier
        for (event, b), res in zip(decoded, results, strict=True):
            if res.ledger is not None:
                last[b.user_id] = (event, res.ledger)
        for user, (event, ledger) in last.items():  # one table write per user and batch
            with as_current(event):
                self.ledger[user] = ledger_to_table(ledger)

    def _count(self, b: ProposalBatch, res: VerifyResult) -> None:
        if res.redelivered:
            self.ctx.parts.count(redelivered=1)
            return
        dropped = res.proposed - res.verified
        metrics.VERIFIER_DROPPED.inc(dropped)
        metrics.VERIFIED.inc(res.verified)
        self.ctx.parts.count(verified=res.verified, dropped=dropped)


def register(ctx: AgentContext) -> None:
    """The verify agent on ``speculated`` (with ``SOLARIS_FUSE_VERIFY`` the speculate agent
    calls :meth:`VerifyAgent.verify_speculated` instead, and nothing reads ``speculated``)."""
    agent = VerifyAgent(ctx)

    @ctx.app.agent(ctx.topics["speculated"], concurrency=1, name="verify")
    async def on_speculated(stream: faust.StreamT) -> None:
        async for events in ctx.batches(stream):
            await ctx.finish("verify", agent.on_batch, events)

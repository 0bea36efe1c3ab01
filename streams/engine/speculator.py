"""Speculation: from each request, propose (user, item) pairs likely to be ranked again soon.

Strategies (in priority order, budget shared):
- ``candidates``: the request's own candidates, in the ranker's order (a user's consecutive
  requests overlap strongly, so today's candidates are the best guess for the next request);
- ``lookahead``: items co-visited with what the user just engaged with, then trending items.
Pairs embedded recently for this user (see :mod:`streams.engine.ledger`) are skipped.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from schemas.records import PairProposal, RequestEvent
from streams.engine.ledger import Confirmed, is_fresh
from streams.engine.lookahead import Lookahead

STRATEGIES = ("candidates", "lookahead")


@dataclass(frozen=True, slots=True)
class SpeculatorConfig:
    """Which strategies run and how many proposals one request may make."""

    strategies: tuple[str, ...]
    #: max proposals per request (caps verifier cost); 0 = unlimited
    budget: int
    #: look-ahead proposals per request (only with the ``lookahead`` strategy)
    lookahead_items: int
    #: a pair embedded less than this long ago (event time) is not proposed again
    refresh_after_ms: int
    #: past this, a verified pair whose vector never came back may be proposed again
    #: (:mod:`streams.engine.ledger`); >= ``refresh_after_ms``: never before that
    in_flight_ms: int

    def __post_init__(self) -> None:
        unknown = set(self.strategies) - set(STRATEGIES)
        if unknown:
            raise ValueError(
                f"unknown speculation strategies {sorted(unknown)}; known: {STRATEGIES}"
            )


@dataclass(slots=True)
class SpeculatorStats:
    requests: int = 0
    proposed: int = 0
    skipped_fresh: int = 0
    over_budget: int = 0


class Speculator:
    """Turns a request into :class:`PairProposal` s (``score=None``). Pure apart from stats."""

    def __init__(self, config: SpeculatorConfig, lookahead: Lookahead | None = None) -> None:
        self.config = config
        self.lookahead = lookahead
        self.stats = SpeculatorStats()

    def propose(
        self,
        request: RequestEvent,
        ledger: dict[int, int],
        confirmed: Confirmed,
        recent_positive_items: Sequence[int] = (),
    ) -> list[PairProposal]:
        """Proposals for ``request`` given the user's embedding ledger, the embeddings that came
        back (``confirmed``, loaded only if a mark is past the in-flight timeout) and recent
        engagements."""
        items, strategies = self.choose(request, ledger, confirmed, recent_positive_items)
        t = request.event_time_ms
        return [
            PairProposal(request.request_id, request.user_id, item, t, strategy, None)
            for item, strategy in zip(items, strategies, strict=True)
        ]

    def choose(
        self,
        request: RequestEvent,
        ledger: dict[int, int],
        confirmed: Confirmed,
        recent_positive_items: Sequence[int] = (),
    ) -> tuple[list[int], list[str]]:
        """:meth:`propose`'s items and their strategies, in order, without a proposal object
        per pair (what the speculate step sends is one batch per request)."""
        cfg = self.config
        t = request.event_time_ms
        self.stats.requests += 1
        items: list[int] = []
        strategies: list[str] = []
        seen: set[int] = set()

        def offer(candidates: Sequence[int], strategy: str) -> None:
            for item in candidates:
                if item in seen:
                    continue
                seen.add(item)
                # most items have no ledger mark: only those need the freshness rule
                if item in ledger and is_fresh(
                    ledger, item, t, cfg.refresh_after_ms, cfg.in_flight_ms, confirmed
                ):
                    self.stats.skipped_fresh += 1
                    continue
                items.append(item)
                strategies.append(strategy)

        if "candidates" in cfg.strategies:
            offer(request.candidates, "candidates")
        if "lookahead" in cfg.strategies and self.lookahead is not None:
            offer(
                self.lookahead.propose(list(recent_positive_items), cfg.lookahead_items, seen),
                "lookahead",
            )
        if cfg.budget and len(items) > cfg.budget:
            self.stats.over_budget += len(items) - cfg.budget
            del items[cfg.budget :], strategies[cfg.budget :]
        self.stats.proposed += len(items)
        return items, strategies

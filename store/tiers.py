"""Coverage tiers of a served embedding. The numbering is part of the VM's input contract
(one-hot of this code) and of every coverage report: renumbering needs a new
``models.config.CODE_VERSION`` (cached bundles retrain). Renumbered twice: the neighbour tier was
split into item-aware and item-blind values (MISSING moved from 3 to 4), then the state tier
(issue 22) was added as 4 (MISSING moved to 5).

Codes are not the serving order: the reader serves exact, then the *state* (the user's FM state
decoded for the candidate: item-aware), then the aggregate, the neighbour tiers, missing. STATE
is numbered after the older tiers so that their codes, and the offline views indexed by them
(exact, aggregate, neighbour_item), stay put; :data:`SERVING_ORDER` is the order."""

from __future__ import annotations

from enum import IntEnum


class Tier(IntEnum):
    EXACT = 0  #: the (user, item) pair embedding, fresh
    AGGREGATE = 1  #: the user's rolling 24 h mean of pair embeddings
    NEIGHBOUR_ITEM = 2  #: similarity-weighted mean of similar users' embedding of *this item*
    NEIGHBOUR_AGGREGATE = 3  #: similarity-weighted mean of similar users' aggregates (item-blind)
    #: the user's stored FM state (as of their previous verified request) decoded for this item
    STATE = 4
    MISSING = 5  #: zeros; the VM is told via the tier feature


#: best first: the order the reader fills a candidate's tier in
SERVING_ORDER: tuple[Tier, ...] = (
    Tier.EXACT,
    Tier.STATE,
    Tier.AGGREGATE,
    Tier.NEIGHBOUR_ITEM,
    Tier.NEIGHBOUR_AGGREGATE,
    Tier.MISSING,
)


#: not a served tier: the code a ranker gives ``vm_solaris`` for rows it could not read at all
#: (store timeout or outage), as opposed to MISSING (read, nothing stored: itself informative).
#: Same number as ``models.runtime.TIER_UNAVAILABLE``.
UNAVAILABLE_CODE = len(Tier)

#: both neighbour tiers (cumulative coverage "+ neighbours" counts them together)
NEIGHBOUR_TIERS: tuple[Tier, ...] = (Tier.NEIGHBOUR_ITEM, Tier.NEIGHBOUR_AGGREGATE)


TIER_NAMES: tuple[str, ...] = tuple(t.name.lower() for t in Tier)

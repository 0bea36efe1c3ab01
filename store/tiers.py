"""Coverage tiers of a served embedding, best first. The numbering is part of the VM's input
contract (one-hot of this code) and of every coverage report: renumbering needs a new
``models.config.CODE_VERSION`` (cached bundles retrain). Numbered once since: the neighbour
tier was split into item-aware and item-blind values (MISSING moved from 3 to 4)."""

from __future__ import annotations

from enum import IntEnum


class Tier(IntEnum):
    EXACT = 0  #: the (user, item) pair embedding, fresh
    AGGREGATE = 1  #: the user's rolling 24 h mean of pair embeddings
    NEIGHBOUR_ITEM = 2  #: similarity-weighted mean of similar users' embedding of *this item*
    NEIGHBOUR_AGGREGATE = 3  #: similarity-weighted mean of similar users' aggregates (item-blind)
    MISSING = 4  #: zeros; the VM is told via the tier feature


#: not a served tier: the code a ranker gives ``vm_solaris`` for rows it could not read at all
#: (store timeout or outage), as opposed to MISSING (read, nothing stored: itself informative).
#: Same number as ``models.runtime.TIER_UNAVAILABLE``.
UNAVAILABLE_CODE = len(Tier)

#: both neighbour tiers (cumulative coverage "+ neighbours" counts them together)
NEIGHBOUR_TIERS: tuple[Tier, ...] = (Tier.NEIGHBOUR_ITEM, Tier.NEIGHBOUR_AGGREGATE)


TIER_NAMES: tuple[str, ...] = tuple(t.name.lower() for t in Tier)

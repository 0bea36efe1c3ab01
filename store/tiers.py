"""Coverage tiers of a served embedding, best first. The numbering is part of the VM's input
contract (one-hot of this code) and of every coverage report: never renumber."""

from __future__ import annotations

from enum import IntEnum


class Tier(IntEnum):
    EXACT = 0  #: the (user, item) pair embedding, fresh
    AGGREGATE = 1  #: the user's rolling 24 h mean of pair embeddings
    NEIGHBOURS = 2  #: similarity-weighted mean from similar users
    MISSING = 3  #: zeros; the VM is told via the tier feature


TIER_NAMES: tuple[str, ...] = tuple(t.name.lower() for t in Tier)

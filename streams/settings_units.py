"""Units and value types shared by the settings modules (no settings here)."""

from __future__ import annotations

from typing import Literal

HOUR_MS = 3_600_000
RankBy = Literal["recurrence", "pair", "vm", "prior", "vm_x_prior"]
"""What orders the pairs the verifier keeps per request (see ``streams.engine.verifier``)."""

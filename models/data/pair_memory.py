"""Clicks with a per-(user, item) memory: a click excites, a skip tires, both decay in event time.

The synthetic world's click model (``models.data.synthetic``) draws its labels here. Labels
must be drawn pair by pair in time order, because each label feeds the logit of the pair's next
exposure; that walk is the only sequential step of the generator, so it lives on its own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True)
class PairMemory:
    """Logit bonus per click / penalty per skip on the same pair's later exposures, with their
    e-folding times in hours (see ``SyntheticConfig`` for the chosen values)."""

    reclick_weight: float
    reclick_hours: float
    fatigue_weight: float
    fatigue_hours: float

    @property
    def active(self) -> bool:
        return self.reclick_weight != 0 or self.fatigue_weight != 0


def pair_clicks(
    memory: PairMemory,
    logit: np.ndarray,
    uniform: np.ndarray,
    users: np.ndarray,
    t_ms: np.ndarray,
    items: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """(click prob, label int8), both [n, shown], with the memory added to ``logit`` [n, shown].

    Row r of ``items`` holds the items request r (user ``users[r]`` at ``t_ms[r]``) showed;
    ``uniform`` [n, shown] decides each label (label = uniform < prob).
    """
    if not memory.active:
        prob = 1.0 / (1.0 + np.exp(-logit))
        return prob, (uniform < prob).astype(np.int8)
    shown = items.shape[1]
    u, it = np.repeat(users, shown), items.reshape(-1)
    hours = np.repeat(t_ms, shown) / 3.6e6
    order = np.lexsort((hours, it, u))
    z, r = logit.reshape(-1), uniform.reshape(-1)
    prob = np.empty(z.shape[0])
    label = np.zeros(z.shape[0], dtype=np.int8)
    key = u[order] * (int(it.max()) + 1) + it[order]
    new_pair = np.concatenate([[True], key[1:] != key[:-1]]).tolist()
    dt = np.diff(hours[order], prepend=0.0)
    keep_click = np.exp(-dt / memory.reclick_hours).tolist()
    keep_skip = np.exp(-dt / memory.fatigue_hours).tolist()
    reclick, fatigue = 0.0, 0.0
    for n, j in enumerate(order.tolist()):
        if new_pair[n]:
            reclick, fatigue = 0.0, 0.0
        else:
            reclick *= keep_click[n]
            fatigue *= keep_skip[n]
        pj = 1.0 / (1.0 + math.exp(-(z[j] + reclick - fatigue)))
        prob[j] = pj
        if r[j] < pj:
            label[j] = 1
            reclick += memory.reclick_weight
        else:
            fatigue += memory.fatigue_weight
    return prob.reshape(logit.shape), label.reshape(logit.shape)


def clicks_at_rate(
    memory: PairMemory,
    logit: np.ndarray,
    uniform: np.ndarray,
    users: np.ndarray,
    t_ms: np.ndarray,
    items: np.ndarray,
    label_rate: float,
    intercept: float,
) -> tuple[np.ndarray, np.ndarray]:
    """``pair_clicks`` of ``logit + b``, b moved from ``intercept`` (solved without the memory)
    until the label rate is about ``label_rate``: clicks feed later logits, so the rate drifts.
    Without an active memory b = ``intercept`` (the memoryless world, bit for bit)."""
    target = math.log(label_rate / (1 - label_rate))
    for _ in range(3 if memory.active else 0):
        _, label = pair_clicks(memory, logit + intercept, uniform, users, t_ms, items)
        rate = min(max(float(label.mean()), 1e-4), 1 - 1e-4)
        intercept += target - math.log(rate / (1 - rate))
    return pair_clicks(memory, logit + intercept, uniform, users, t_ms, items)

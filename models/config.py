"""``TrainConfig``: every knob of training and evaluation, frozen, hashable, torch-free.

It lives apart from the torch code so the serving side (``models.bundle``) can hash it to find
a cached bundle without importing torch. Build it from the app settings with
``TrainConfig.from_settings(settings)`` (any object with ``embedding_dim`` and ``history_len``;
``models`` does not import ``streams``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

#: Bump when model code changes in a way that invalidates cached bundles (part of the cache key).
CODE_VERSION = "12"  # 12: vm_solaris_kd may ship vm_solaris_engine_kd or the blend, meta.json vm_solaris_is; 11: bundles ship the fair VM (vm_fair.onnx); 10: a representation past the neighbour horizon starts afresh; 9: vm_solaris_engine_kd may choose KD weight 0; 8: state tier code 4 (missing 5); 7: missing tier routed to the frozen vm when validation says so;  6: vm_solaris serves TIER_UNAVAILABLE rows with the frozen vm; 3: five tiers

MINUTE_MS = 60_000
HOUR_MS = 60 * MINUTE_MS
DAY_MS = 24 * HOUR_MS

#: Staleness grid of issue 3 item 8: FM inputs cut at event time − Δ.
DEFAULT_LAGS_MS: tuple[int, ...] = (0, MINUTE_MS, 10 * MINUTE_MS, HOUR_MS, DAY_MS)


def lag_name(lag_ms: int) -> str:
    """``0`` → ``"0"``, 60 000 → ``"1m"``, 600 000 → ``"10m"``, 3 600 000 → ``"1h"``, ``"24h"``."""
    if lag_ms == 0:
        return "0"
    if lag_ms % HOUR_MS == 0:
        return f"{lag_ms // HOUR_MS}h"
    if lag_ms % MINUTE_MS == 0:
        return f"{lag_ms // MINUTE_MS}m"
    return f"{lag_ms}ms"


def file_digest(path: Path | str) -> str:
    """sha256 of a file's bytes (streamed): the data half of the model-cache key."""
    h = hashlib.sha256()
    with Path(path).open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


class SettingsLike(Protocol):
    """The two settings training needs (``streams.settings.Settings`` satisfies it)."""

    @property
    def embedding_dim(self) -> int: ...

    @property
    def history_len(self) -> int: ...


@dataclass(frozen=True)
class TrainConfig:
    """Training and evaluation settings. ``fingerprint()`` keys the model cache."""

    # --- shared ------------------------------------------------------------------------------
    seeds: int = 3  # key models are trained once per seed; the bundle ships seed 0
    history_len: int = 20  # L: last-L impressions fed to the FM (settings.history_len)
    embedding_dim: int = 64  # d: the FM's interaction embedding
    threads: int = 1  # torch intra-op threads: 1 is far faster than 2 on a shared 2-core box
    split: tuple[float, float, float] = (0.6, 0.2, 0.2)  # periods A (FM), B (VMs), C (test)
    fm_valid_fraction: float = 0.1  # tail of A for FM early stopping
    vm_valid_fraction: float = 0.2  # tail of B for VM tuning
    # --- FM ----------------------------------------------------------------------------------
    fm_item_dim: int = 32
    fm_hidden: int = 128
    fm_heads: int = 2
    fm_dropout: float = 0.1
    fm_self_attention: bool = True
    # Weight of the generative next-item loss (models.fm). Off by default: on ml-latest-small it
    # cost 0.02–0.035 NE at Δ = 0 and gained nothing clear at lag; on synthetic it was neutral.
    fm_next_item_weight: float = 0.0
    fm_epochs: int = 3
    fm_batch: int = 256
    fm_lr: float = 2e-3
    fm_weight_decay: float = 1e-6
    fm_patience: int = 0  # CTR embeddings overfit after ~1 epoch ("one-epoch phenomenon")
    # Share of FM training examples whose history is cut at t − Δ with Δ log-uniform in
    # [1 min, fm_max_lag_ms]: teaches the FM to predict from a stale view of the user, which is
    # what a precomputed embedding is (§7: the Δ = 0 gain collapses at 1 h without it).
    fm_lag_share: float = 0.5
    fm_max_lag_ms: int = DAY_MS
    # --- VMs ---------------------------------------------------------------------------------
    vm_id_dim: int = 16
    vm_hidden: tuple[int, ...] = (64, 32)
    vm_epochs: int = 15
    vm_batch: int = 256
    vm_patience: int = 2
    vm_lrs: tuple[float, ...] = (3e-3, 1e-2)
    vm_weight_decays: tuple[float, ...] = (0.0, 1e-5)
    # Never 0: id dropout is also what trains the OOV slot (unseen test users/items map there).
    vm_id_dropouts: tuple[float, ...] = (0.1, 0.3)
    # Soft-label KD: loss = (1 − w)·BCE(y, σ(z)) + w·T²·BCE(σ(z_fm/T), σ(z/T)).
    kd_weight: float = 0.5  # the KD diagnostics' (vm_solaris_kd, ...) fixed point
    kd_temperature: float = 1.0
    # vm_kd is tuned on its own grid of weight × temperature, at the optimiser point the plain
    # vm won: as many points as vm_solaris's grid (issue 22: KD gets the same budget).
    kd_weights: tuple[float, ...] = (0.2, 0.4, 0.6, 0.8)
    kd_temperatures: tuple[float, ...] = (1.0, 2.0)
    # The fair VM (issue 22): every ranking VM also reads the cheap streaming user features of
    # models.user_features; ``vm_id_only`` (user id, item id, context) is reported next to it.
    # On by default: the live ranker reads the user's history from the store in its one round
    # trip (the verifier stays id-only).
    vm_user_features: bool = True
    # Tier mix of the *offline* tier construction (exact, aggregate, neighbour_item,
    # neighbour_aggregate, missing): paper ≈ 40–50 % exact, 85–90 % with aggregates; §7
    # measured 0.36/0.70 (MovieLens) and 0.26/0.36 (Taobao). A tier that has no value for a pair
    # falls through to the next one; the offline construction has no neighbour aggregates. The
    # engine-built training (models.served) uses the mix the engine serves instead.
    tier_rates: tuple[float, float, float, float, float, float] = (0.4, 0.35, 0.1, 0.0, 0.0, 0.15)
    vm_emb_proj_dim: int = 32  # vm_solaris: the embedding enters the MLP through this projection
    vm_exact_weight: float = 1.0  # vm_solaris: extra loss of every row scored as "exact"
    vm_missing_weight: float = 0.5  # vm_solaris: extra loss of every row scored as "missing"
    # vm_solaris (every embedding variant) serves rows of the missing tier with the trained plain
    # vm (frozen, in its graph): every input missing scores exactly as the baseline (issue 22)
    vm_solaris_baseline_on_missing: bool = True
    # ... and rows of the *missing* tier: "validation" = where the base has the lower logloss on
    # the validation rows of that tier (chosen with the grid point, reused by later seeds),
    # "own" = never, "baseline" = always (needs vm_solaris_baseline_on_missing)
    vm_solaris_missing_route: Literal["validation", "own", "baseline"] = "validation"
    # How the shipped vm_solaris also uses tuned KD: "blend" (default) ships
    # σ(w·z_served + (1 − w)·z_kd), w chosen on the validation rows (models.blend; one graph,
    # models.blend_vm); "loss" the engine-built VM trained with the KD loss as well
    # (vm_solaris_engine_kd: KD weight × temperature on vm_kd's grid plus weight 0, chosen on
    # validation); "off" the engine-built VM alone. Measured at 415677f (issue 22, 3 seeds,
    # NE(kd) − NE(served), off / loss / blend): ml-100k +0.0074 / +0.0032 / +0.0091 [+0.0039,
    # +0.0145]; Taobao −0.0031 / +0.0006 / 0.0000 (w = 0: KD itself); synthetic +0.0030 /
    # +0.0097 / +0.0055; ml-latest-small +0.0043 / +0.0053 / +0.0059. Only the blend is behind
    # KD nowhere and beats it where the served VM beats the FM. A store outage scores as
    # σ(w·z_vm + (1 − w)·z_kd). docs/knowledge-transfer.md.
    vm_solaris_kd: Literal["off", "loss", "blend"] = "blend"
    aggregate_window_ms: int = DAY_MS  # user aggregate = mean of pair embeddings in this window
    neighbour_k: int = 10  # neighbour-tier proxy: other users' latest embeddings of the item
    lags_ms: tuple[int, ...] = DEFAULT_LAGS_MS
    serving_lag_ms: int = 10 * MINUTE_MS  # the vm_solaris shipped in the bundle trains at this Δ
    bootstrap_replicates: int = 1000

    @classmethod
    def from_settings(cls, settings: SettingsLike, **overrides: Any) -> TrainConfig:
        """Defaults, with ``embedding_dim`` and ``history_len`` taken from the app settings."""
        base: dict[str, Any] = {
            "embedding_dim": int(settings.embedding_dim),
            "history_len": int(settings.history_len),
            "vm_user_features": bool(getattr(settings, "vm_user_features", True)),
            "vm_solaris_kd": str(getattr(settings, "vm_solaris_kd", "blend")),
        }
        base.update(overrides)
        return cls(**base)

    def replace(self, **changes: Any) -> TrainConfig:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def fingerprint(self) -> str:
        """Stable hex digest of every field (the cache key's config half)."""
        text = json.dumps(self.to_dict(), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class GridPoint:
    """One VM hyper-parameter setting of the tuning grid."""

    lr: float
    weight_decay: float
    id_dropout: float
    epochs: int = field(default=0, compare=False)  # best epoch found on the validation slice
    kd_weight: float | None = None  # None: TrainConfig.kd_weight (KD variants only)
    kd_temperature: float | None = None  # None: TrainConfig.kd_temperature
    #: vm_solaris with a base: serve the missing tier with the base (None: not decided / no base)
    missing_to_base: bool | None = field(default=None, compare=False)

"""VM training (torch, CPU, seeded): one variant at one grid point, and the tuning grid.

``fit_vm`` trains with early stopping on a validation slice, or for a fixed number of epochs when
refitting. ``tune_vm`` runs the grid on B's train/valid slices and refits the best point on all
of B with the best epoch count (fair baselines: every variant is tuned alike).
"""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass, replace

import numpy as np
import torch
from torch import nn

from models.config import GridPoint, TrainConfig
from models.fm import FoundationModel
from models.metrics import logloss
from models.runtime import TIER_MISSING
from models.train import bce, seed_everything
from models.vm import N_TIERS, VerticalModel
from models.vm_grid import grid, kd_point

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class VariantSpec:
    """What a VM variant consumes and how it is trained."""

    name: str
    fm_logit: bool = False
    embedding: bool = False
    kd: bool = False
    user_features: bool = False  # the fair VM's streaming user features (models.user_features)


@dataclass(frozen=True)
class FMHead:
    """The FM's CTR head (logit = weight · embedding + bias), to warm-start ``vm_solaris``."""

    weight: np.ndarray  # float32 [d]
    bias: float

    @classmethod
    def of(cls, fm: FoundationModel) -> FMHead:
        w = fm.head.weight.detach().numpy().reshape(-1).astype(np.float32).copy()
        return cls(w, float(fm.head.bias.detach().item()))


@dataclass(frozen=True)
class VMData:
    """Inputs of VM training/evaluation rows (numpy, aligned; unused parts may be None)."""

    user: np.ndarray  # int64 [N] (vocab indices)
    item: np.ndarray  # int64 [N]
    context: np.ndarray  # int64 [N, 2]
    label: np.ndarray  # int8 [N]
    fm_logit: np.ndarray | None = None  # float32 [N] (FM at the variant's lag)
    teacher_logit: np.ndarray | None = None  # float32 [N] (FM at Δ = 0, for KD)
    tier_embeddings: np.ndarray | None = None  # float32 [N, 3, d]: exact, aggregate, neighbours
    tier_available: np.ndarray | None = None  # bool [N, 3]
    #: what the serving engine read for each row (tier int64 [N], vector float32 [N, d]): when
    #: set, embedding variants learn from these instead of tiers sampled from the offline views
    served_tier: np.ndarray | None = None
    served_embedding: np.ndarray | None = None
    #: the fair VM's inputs (models.user_features): float32 [N, F] and int64 [N, k]
    user_stats: np.ndarray | None = None
    recent_pos: np.ndarray | None = None

    def take(self, idx: np.ndarray) -> VMData:
        def sub(a: np.ndarray | None) -> np.ndarray | None:
            return None if a is None else a[idx]

        return VMData(
            self.user[idx],
            self.item[idx],
            self.context[idx],
            self.label[idx],
            sub(self.fm_logit),
            sub(self.teacher_logit),
            sub(self.tier_embeddings),
            sub(self.tier_available),
            sub(self.served_tier),
            sub(self.served_embedding),
            sub(self.user_stats),
            sub(self.recent_pos),
        )

    def __len__(self) -> int:
        return int(self.label.shape[0])


def sample_tiers(
    rng: np.random.Generator, available: np.ndarray, rates: tuple[float, ...]
) -> np.ndarray:
    """Draw a tier per row from ``rates``; an unavailable tier falls through to the next one.

    ``available`` has a column per offline view (exact, aggregate, neighbour_item); tiers past
    them (neighbour_aggregate) have no offline value and fall through to missing.
    """
    n = available.shape[0]
    tier = np.asarray(rng.choice(N_TIERS, size=n, p=np.asarray(rates) / np.sum(rates)))
    for t in range(
        N_TIERS - 1
    ):  # exact → aggregate → neighbour_item → neighbour_agg → state → missing
        have = available[:, t] if t < available.shape[1] else np.zeros(n, bool)
        tier = np.where((tier == t) & ~have, t + 1, tier)
    return tier.astype(np.int64)


def select_tier(data: VMData, tier: np.ndarray) -> np.ndarray:
    """The embedding each row gets under ``tier`` (zeros for missing), float32 [N, d]."""
    if data.tier_embeddings is None:
        raise ValueError("no tier embeddings")
    views = data.tier_embeddings.shape[1]
    idx = np.minimum(tier, views - 1)
    out = data.tier_embeddings[np.arange(len(data)), idx]
    return np.where((tier >= views)[:, None], 0.0, out).astype(np.float32)


def vm_tensors(spec: VariantSpec, data: VMData, tier: np.ndarray | None) -> dict[str, torch.Tensor]:
    """Forward kwargs of a ``VerticalModel`` for these rows."""
    out = {
        "user": torch.from_numpy(data.user),
        "item": torch.from_numpy(data.item),
        "context": torch.from_numpy(data.context),
    }
    if spec.user_features:
        if data.user_stats is None or data.recent_pos is None:
            raise ValueError(f"{spec.name} needs user features")
        out["user_stats"] = torch.from_numpy(data.user_stats)
        out["recent_pos"] = torch.from_numpy(data.recent_pos)
    if spec.fm_logit:
        if data.fm_logit is None:
            raise ValueError(f"{spec.name} needs fm_logit")
        out["fm_logit"] = torch.from_numpy(data.fm_logit)
    if spec.embedding:
        if tier is None and data.served_tier is not None and data.served_embedding is not None:
            out["embedding"] = torch.from_numpy(data.served_embedding.astype(np.float32))
            out["tier"] = torch.from_numpy(data.served_tier.astype(np.int64))
            return out
        if tier is None:
            raise ValueError(f"{spec.name} needs tiers (or served tiers)")
        out["embedding"] = torch.from_numpy(select_tier(data, tier))
        out["tier"] = torch.from_numpy(tier)
    return out


def _training_tiers(
    spec: VariantSpec, data: VMData, rng: np.random.Generator, cfg: TrainConfig
) -> np.ndarray | None:
    """Tiers of one epoch: None = the served tiers (engine-built rows) or no embedding input;
    else a draw from the offline views at ``cfg.tier_rates``."""
    if not spec.embedding or data.served_tier is not None or data.tier_available is None:
        return None
    return sample_tiers(rng, data.tier_available, cfg.tier_rates)


def build_vm(
    spec: VariantSpec,
    cfg: TrainConfig,
    n_users: int,
    n_items: int,
    gp: GridPoint,
    train: VMData,
    fm_head: FMHead | None = None,
    base: VerticalModel | None = None,
) -> VerticalModel:
    model = VerticalModel(
        n_users,
        n_items,
        cfg.vm_id_dim,
        cfg.vm_hidden,
        spec.fm_logit,
        train.tier_embeddings.shape[-1]
        if spec.embedding and train.tier_embeddings is not None
        else 0,
        gp.id_dropout,
        cfg.vm_emb_proj_dim,
        spec.user_features,
        copy.deepcopy(base) if base is not None and spec.embedding else None,
    )
    logit_stats = None
    if spec.fm_logit and train.fm_logit is not None:
        logit_stats = (float(train.fm_logit.mean()), float(train.fm_logit.std() + 1e-6))
    emb_mean = emb_std = None
    if spec.embedding and train.tier_embeddings is not None:
        exact = torch.from_numpy(train.tier_embeddings[:, 0])
        emb_mean, emb_std = exact.mean(0), exact.std(0)
    model.set_input_stats(logit_stats, emb_mean, emb_std)
    if spec.embedding and fm_head is not None and train.tier_embeddings is not None:
        score = train.tier_embeddings[:, 0] @ fm_head.weight + fm_head.bias
        stats = (float(score.mean()), float(score.std() + 1e-6))
        model.init_from_fm_head(torch.from_numpy(fm_head.weight), fm_head.bias, stats)
    return model


@torch.no_grad()
def predict_vm(
    model: VerticalModel,
    spec: VariantSpec,
    data: VMData,
    tier: np.ndarray | None,
) -> np.ndarray:
    """Probabilities float32 [N]."""
    model.eval()
    z = model(**vm_tensors(spec, data, tier))
    return torch.sigmoid(z).numpy().astype(np.float32)


def fit_vm(
    spec: VariantSpec,
    cfg: TrainConfig,
    n_users: int,
    n_items: int,
    gp: GridPoint,
    train: VMData,
    valid: VMData | None,
    seed: int,
    fm_head: FMHead | None = None,
    base: VerticalModel | None = None,
) -> tuple[VerticalModel, int, float]:
    """Train one VM. With ``valid``: early stopping, returns (model, best epochs, valid logloss);
    without: exactly ``gp.epochs`` epochs. ``base``: see :class:`VerticalModel` (embedding
    variants only; trained as a frozen part)."""
    seed_everything(seed, cfg.threads)
    rng = np.random.default_rng(seed + 1)
    model = build_vm(spec, cfg, n_users, n_items, gp, train, fm_head, base)
    trainable = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.Adam(trainable, lr=gp.lr, weight_decay=gp.weight_decay)
    y = torch.from_numpy(train.label.astype(np.float32))
    teacher = None
    kd_weight, kd_temp = kd_point(cfg, gp)
    if spec.kd:
        if train.teacher_logit is None:
            raise ValueError(f"{spec.name} needs teacher logits")
        teacher = torch.sigmoid(torch.from_numpy(train.teacher_logit) / kd_temp)
    valid_tier = (
        _training_tiers(spec, valid, np.random.default_rng(seed + 2), cfg)
        if valid is not None
        else None
    )
    n_epochs = cfg.vm_epochs if valid is not None else max(gp.epochs, 1)
    best, best_epoch, best_state, bad = float("inf"), 1, copy.deepcopy(model.state_dict()), 0
    loss_fn = bce()
    t_sq = kd_temp**2
    for epoch in range(n_epochs):
        model.train()
        inputs = vm_tensors(spec, train, _training_tiers(spec, train, rng, cfg))
        exact_inputs = None
        if spec.embedding and cfg.vm_exact_weight > 0:
            exact_inputs = vm_tensors(spec, train, np.zeros(len(train), np.int64))
        perm = torch.from_numpy(rng.permutation(len(train)))
        for s in range(0, len(train), cfg.vm_batch):
            b = perm[s : s + cfg.vm_batch]
            z = model(**{k: v[b] for k, v in inputs.items()})
            loss = loss_fn(z, y[b])
            if teacher is not None:
                soft = nn.functional.binary_cross_entropy_with_logits(z / kd_temp, teacher[b])
                loss = (1 - kd_weight) * loss + kd_weight * t_sq * soft
            if spec.embedding:
                loss = loss + _extreme_tier_loss(model, cfg, exact_inputs, inputs, b, y[b])
            opt.zero_grad()
            loss.backward()
            opt.step()
        if valid is None:
            continue
        ll = logloss(valid.label, predict_vm(model, spec, valid, valid_tier))
        if ll < best - 1e-5:
            best, best_epoch, best_state, bad = ll, epoch + 1, copy.deepcopy(model.state_dict()), 0
        else:
            bad += 1
            if bad > cfg.vm_patience:
                break
    if valid is not None:
        model.load_state_dict(best_state)
    model.eval()
    return model, best_epoch, best


def _extreme_tier_loss(
    model: VerticalModel,
    cfg: TrainConfig,
    exact_inputs: dict[str, torch.Tensor] | None,
    inputs: dict[str, torch.Tensor],
    b: torch.Tensor,
    y: torch.Tensor,
) -> torch.Tensor:
    """Extra passes of every row as ``exact`` and as ``missing`` (vm_solaris variants).

    The sampled pass teaches the realistic tier mix; these two make sure the extremes are
    learned from all rows: full coverage should be at least as good as score transfer, and a
    store outage should degrade the ranker to (about) the baseline VM, not below it.
    """
    loss_fn = bce()
    loss = torch.zeros(())
    if exact_inputs is not None:
        loss = loss + cfg.vm_exact_weight * loss_fn(
            model(**{k: v[b] for k, v in exact_inputs.items()}), y
        )
    if cfg.vm_missing_weight > 0:
        batch = {k: v[b] for k, v in inputs.items()}
        batch["embedding"] = torch.zeros_like(batch["embedding"])
        batch["tier"] = torch.full_like(batch["tier"], TIER_MISSING)
        loss = loss + cfg.vm_missing_weight * loss_fn(model(**batch), y)
    return loss


def tune_vm(
    spec: VariantSpec,
    cfg: TrainConfig,
    n_users: int,
    n_items: int,
    train: VMData,
    valid: VMData,
    seed: int,
    fixed: GridPoint | None = None,
    fm_head: FMHead | None = None,
    candidates: list[GridPoint] | None = None,
    base: VerticalModel | None = None,
) -> tuple[VerticalModel, GridPoint]:
    """Search ``candidates`` (default: the full grid) on (train, valid) unless ``fixed`` is
    given, then refit the best point on train ∪ valid for its best epoch count."""
    if fixed is None:
        scored = []
        valid_tier = _training_tiers(spec, valid, np.random.default_rng(seed + 2), cfg)
        for gp in candidates or grid(cfg):
            fitted, epochs, ll = fit_vm(
                spec, cfg, n_users, n_items, gp, train, valid, seed, fm_head, base
            )
            route = missing_route(fitted, spec, valid, valid_tier)
            scored.append((ll, replace(gp, epochs=epochs, missing_to_base=route)))
            log.debug("%s %s valid logloss %.5f", spec.name, gp, ll)
        fixed = min(scored, key=lambda s: s[0])[1]
    full = _concat(train, valid)
    model, _, _ = fit_vm(spec, cfg, n_users, n_items, fixed, full, None, seed, fm_head, base)
    if model.base is not None:
        model.missing_to_base.fill_(_route(cfg, fixed.missing_to_base))
    return model, fixed


def missing_route(
    model: VerticalModel, spec: VariantSpec, valid: VMData, tier: np.ndarray | None
) -> bool | None:
    """Whether ``model``'s base scores the validation rows of the missing tier better (lower
    logloss) than the model itself; None when there is no base or no such row with both
    labels' information (fewer than 2 rows)."""
    if model.base is None or not spec.embedding:
        return None
    tiers = valid.served_tier if tier is None else tier
    if tiers is None:
        return None
    rows = np.flatnonzero(np.asarray(tiers) == TIER_MISSING)
    if rows.size < 2:
        return None
    part = valid.take(rows)
    part_tier = None if tier is None else np.asarray(tier)[rows]
    own = logloss(part.label, predict_vm(model, spec, part, part_tier))
    base_spec = replace(spec, embedding=False, fm_logit=False, kd=False)
    base = logloss(part.label, predict_vm(model.base, base_spec, part, None))
    return bool(base < own)


def _route(cfg: TrainConfig, decided: bool | None) -> bool:
    if cfg.vm_solaris_missing_route == "baseline":
        return True
    if cfg.vm_solaris_missing_route == "own":
        return False
    return bool(decided)


def _concat(a: VMData, b: VMData) -> VMData:
    def cat(x: np.ndarray | None, y: np.ndarray | None) -> np.ndarray | None:
        return None if x is None or y is None else np.concatenate([x, y])

    return VMData(
        np.concatenate([a.user, b.user]),
        np.concatenate([a.item, b.item]),
        np.concatenate([a.context, b.context]),
        np.concatenate([a.label, b.label]),
        cat(a.fm_logit, b.fm_logit),
        cat(a.teacher_logit, b.teacher_logit),
        cat(a.tier_embeddings, b.tier_embeddings),
        cat(a.tier_available, b.tier_available),
        cat(a.served_tier, b.served_tier),
        cat(a.served_embedding, b.served_embedding),
        cat(a.user_stats, b.user_stats),
        cat(a.recent_pos, b.recent_pos),
    )

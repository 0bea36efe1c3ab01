"""Vertical models (VMs): small id-embedding + MLP rankers, in the variants issue 3 compares.

One class covers every variant; what differs is the optional extra input:

==================  ====================================================  ==================
variant             inputs                                                loss
==================  ====================================================  ==================
``vm``              user id, item id, context (hour, weekday)             BCE
``vm_kd``           same                                                  BCE + KD (FM soft)
``vm_fm_logit``     same + the FM's logit (score transfer)                BCE
``vm_solaris``      same + FM interaction embedding + one-hot tier        BCE
``vm_solaris_kd``   same as ``vm_solaris``                                BCE + KD
==================  ====================================================  ==================

With ``user_features`` (the *fair* VM of issue 22, ``TrainConfig.vm_user_features``) every
variant also reads the cheap streaming user features of ``models.user_features``: a few
history statistics and the mean of its own item embeddings over the user's last engaged items,
plus that vector's dot product with the candidate's. ``vm_id_only`` is the variant without them.

With a ``base`` (``TrainConfig.vm_solaris_baseline_on_missing``), an embedding variant is
trained as before, on every row, and *serves* (eval mode, the exported graph) every row of the
scorer-only code ``TIER_UNAVAILABLE`` (the store could not be read) with the trained plain
``vm`` (frozen, inside the same graph): with every input unavailable it *is* the baseline VM,
so a store outage can never score worse than the ranker a team had before SOLARIS (issue 22's
degradation bar, by construction). Rows of the *missing* tier (nothing stored for the user:
informative, e.g. a new user) keep this model's own score. Measured on 3 seeds before this
form: a residual (base + a correction gated off on missing) cut TR at exact coverage on
ml-100k from 0.80 to 0.31; routing every *missing* row to the base also in training cut it to
0.65; routing every missing row to it only when serving kept 0.85 but made the engine-built
served mix on synthetic 0.010 NE worse (0.8179 → 0.8279), where missing rows are new users
the model had learnt to score better than the VM, while on ml-100k it lifted the served TR
from 0.08 to 0.43. So whether missing rows go to the base is decided per model, on validation
rows of the missing tier (``TrainConfig.vm_solaris_missing_route``, the ``missing_to_base``
buffer; see ``models.train_vm.missing_route``).

Unseen ids map to the OOV slot (``models.features.OOV``); training replaces ids by OOV with
probability ``id_dropout`` so that slot is trained for the test period's new users and items.
Embedding inputs are standardised with the training set's statistics (buffers, so ONNX carries
them) and zeroed when the tier says ``missing``.
"""

from __future__ import annotations

import torch
from torch import nn

from models.features import N_HOURS, N_WEEKDAYS, OOV
from models.runtime import (  # the served tier codes (one-hot width)
    N_TIERS,
    TIER_MISSING,
    TIER_UNAVAILABLE,
)
from models.user_features import N_USER_STATS


class VerticalModel(nn.Module):
    """``forward(...) -> logit [B]``. Extra inputs are ``None`` unless the variant uses them."""

    embedding_dim: int
    fm_logit_input: bool
    # buffers (registered in __init__ only for the variants that use them)
    logit_stats: torch.Tensor
    score_stats: torch.Tensor
    missing_to_base: torch.Tensor
    emb_mean: torch.Tensor
    emb_std: torch.Tensor

    def __init__(
        self,
        n_users: int,
        n_items: int,
        id_dim: int = 16,
        hidden: tuple[int, ...] = (64, 32),
        fm_logit_input: bool = False,
        embedding_dim: int = 0,
        id_dropout: float = 0.0,
        emb_proj_dim: int = 32,
        user_features: bool = False,
        base: VerticalModel | None = None,
    ) -> None:
        super().__init__()
        #: a trained VM without FM inputs, frozen: in eval mode rows of TIER_UNAVAILABLE get
        #: the base's logit exactly, the others this model's own (graceful degradation)
        self.base = base
        #: eval mode: also score rows of the *missing* tier with the base (chosen per model on
        #: validation rows, ``models.train_vm.missing_route``); a buffer, so the graph has it
        self.register_buffer("missing_to_base", torch.zeros((), dtype=torch.bool))
        if base is not None:
            if not embedding_dim or base.embedding_dim or base.fm_logit_input:
                raise ValueError("a base VM goes under an embedding variant and reads no FM input")
            base.requires_grad_(False)
            base.eval()
        self.id_dropout = id_dropout
        self.user_features = user_features
        self.fm_logit_input = fm_logit_input
        self.embedding_dim = embedding_dim
        self.user = nn.Embedding(n_users, id_dim)
        self.item = nn.Embedding(n_items, id_dim)
        self.user_bias = nn.Embedding(n_users, 1)
        self.item_bias = nn.Embedding(n_items, 1)
        self.hour = nn.Embedding(N_HOURS, 4)
        self.weekday = nn.Embedding(N_WEEKDAYS, 4)
        for emb in (self.user, self.item, self.hour, self.weekday):
            nn.init.normal_(emb.weight, std=0.05)
        nn.init.zeros_(self.user_bias.weight)
        nn.init.zeros_(self.item_bias.weight)
        n_in = 2 * id_dim + 8
        if user_features:  # stats + pooled recent engaged items + its dot with the candidate
            n_in += N_USER_STATS + id_dim + 1
        if fm_logit_input:
            n_in += 1
            self.register_buffer("logit_stats", torch.tensor([0.0, 1.0]))
            self.logit_scale = nn.Parameter(torch.ones(1))
        if embedding_dim:
            self.emb_proj = nn.Linear(embedding_dim, emb_proj_dim)
            n_in += emb_proj_dim + N_TIERS + 1
            self.register_buffer("emb_mean", torch.zeros(embedding_dim))
            self.register_buffer("emb_std", torch.ones(embedding_dim))
            self.register_buffer("score_stats", torch.tensor([0.0, 1.0]))
            # The FM's score read back from the embedding through a copy of the FM's head,
            # scaled per tier: a calibrated starting point the MLP then corrects.
            self.emb_head = nn.Linear(embedding_dim, 1)
            self.tier_scale = nn.Embedding(N_TIERS, 1)
            nn.init.ones_(self.tier_scale.weight)
        layers: list[nn.Module] = []
        for h in hidden:
            layers += [nn.Linear(n_in, h), nn.ReLU()]
            n_in = h
        layers.append(nn.Linear(n_in, 1))
        self.mlp = nn.Sequential(*layers)

    def set_input_stats(
        self,
        logit_mean_std: tuple[float, float] | None,
        emb_mean: torch.Tensor | None,
        emb_std: torch.Tensor | None,
    ) -> None:
        """Standardisation constants from the training set (kept in the exported graph)."""
        if logit_mean_std is not None and self.fm_logit_input:
            self.logit_stats.copy_(torch.tensor(logit_mean_std))
        if emb_mean is not None and emb_std is not None and self.embedding_dim:
            self.emb_mean.copy_(emb_mean)
            self.emb_std.copy_(emb_std.clamp(min=1e-3))

    def init_from_fm_head(
        self, weight: torch.Tensor, bias: float, score_mean_std: tuple[float, float]
    ) -> None:
        """Start the embedding's score path as the FM's own CTR head (``weight`` [d]);
        ``score_mean_std`` standardises that score where it enters the MLP."""
        if self.embedding_dim:
            with torch.no_grad():
                self.emb_head.weight.copy_(weight.reshape(1, -1))
                self.emb_head.bias.fill_(bias)
                self.score_stats.copy_(torch.tensor(score_mean_std))

    def forward(
        self,
        user: torch.Tensor,  # int64 [B]
        item: torch.Tensor,  # int64 [B]
        context: torch.Tensor,  # int64 [B, 2]
        fm_logit: torch.Tensor | None = None,  # float32 [B]
        embedding: torch.Tensor | None = None,  # float32 [B, d]
        tier: torch.Tensor | None = None,  # int64 [B]
        user_stats: torch.Tensor | None = None,  # float32 [B, N_USER_STATS]
        recent_pos: torch.Tensor | None = None,  # int64 [B, k] (0 = padding)
    ) -> torch.Tensor:
        ids = (user, item)  # the base reads the ids as given (no dropout: it is fixed)
        if self.training and self.id_dropout > 0:
            user = torch.where(torch.rand(user.shape) < self.id_dropout, OOV, user)
            item = torch.where(torch.rand(item.shape) < self.id_dropout, OOV, item)
        item_vec = self.item(item)
        parts = [
            self.user(user),
            item_vec,
            self.hour(context[:, 0]),
            self.weekday(context[:, 1]),
        ]
        if self.user_features:
            if user_stats is None or recent_pos is None:
                raise ValueError("this VM reads user features: pass user_stats and recent_pos")
            parts += self._user_parts(item_vec, user_stats, recent_pos)
        skip = (self.user_bias(user) + self.item_bias(item)).squeeze(-1)
        if self.fm_logit_input:
            if fm_logit is None:
                raise ValueError("this VM variant needs fm_logit")
            z = (fm_logit - self.logit_stats[0]) / self.logit_stats[1]
            parts.append(z.unsqueeze(-1))
            skip = skip + self.logit_scale * fm_logit
        if self.embedding_dim:
            if embedding is None or tier is None:
                raise ValueError("this VM variant needs embedding and tier")
            unavailable = tier == TIER_UNAVAILABLE
            to_base = unavailable | ((tier == TIER_MISSING) & self.missing_to_base)
            tier = torch.where(unavailable, TIER_MISSING, tier)  # to this network: missing
            present = (tier != TIER_MISSING).to(torch.float32).unsqueeze(-1)
            e = (embedding - self.emb_mean) / self.emb_std * present
            parts.append(torch.relu(self.emb_proj(e)))
            parts.append(nn.functional.one_hot(tier, N_TIERS).to(torch.float32))
            score = self.emb_head(embedding) * present  # [B, 1]: the FM's score, read back
            parts.append((score - self.score_stats[0]) / self.score_stats[1] * present)
            skip = skip + (score * self.tier_scale(tier)).squeeze(-1)
        x = torch.cat(parts, dim=1)
        out = self.mlp(x).squeeze(-1) + skip
        if self.base is None or self.training:  # trained on every row as itself
            return out
        base = self.base(*ids, context, user_stats=user_stats, recent_pos=recent_pos)
        return torch.where(to_base, base, out)

    def train(self, mode: bool = True) -> VerticalModel:
        """The base stays in eval mode (no id dropout): it is a fixed, trained model."""
        super().train(mode)
        if self.base is not None:
            self.base.eval()
        return self

    def _user_parts(
        self, item_vec: torch.Tensor, user_stats: torch.Tensor, recent_pos: torch.Tensor
    ) -> list[torch.Tensor]:
        """History statistics, the mean item vector of the last engaged items, and its dot
        product with the candidate's vector (zero for a user with no engaged item)."""
        present = (recent_pos != 0).to(torch.float32).unsqueeze(-1)  # [B, k, 1]
        pooled = (self.item(recent_pos) * present).sum(1) / present.sum(1).clamp(min=1.0)
        affinity = (pooled * item_vec).sum(-1, keepdim=True)
        return [user_stats, pooled, affinity]

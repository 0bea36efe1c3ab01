"""The validation-fitted blend of two VMs as one torch module, so it exports to one ONNX graph
with the first VM's inputs (the ranker's ``vm_solaris`` contract is unchanged).

``first`` is the engine-built ``vm_solaris`` (embedding + tier + streaming features, with its
frozen store-free baseline); ``second`` is ``vm_kd`` (no store inputs). With every input
unavailable the graph still scores without the store: ``first`` falls back to its baseline
inside the graph and ``second`` never read the store.
"""

from __future__ import annotations

import torch
from torch import nn

from models.blend import LOGIT_BOUND, Blend
from models.vm import VerticalModel


class BlendedVM(nn.Module):
    """``a·first(...) + b·second(...) + c`` on logits; looks like ``first`` to the exporter."""

    def __init__(self, first: VerticalModel, second: VerticalModel, blend: Blend) -> None:
        super().__init__()
        if second.embedding_dim or second.fm_logit_input:
            raise ValueError("the second VM of a blend must not read the store (vm_kd)")
        if second.user_features and not first.user_features:
            raise ValueError("the second VM reads user features the first one's inputs lack")
        self.first, self.second = first, second
        self.blend = blend
        # what models.export reads off a VM to name the graph's inputs and metadata
        self.fm_logit_input = False
        self.user_features = first.user_features
        self.embedding_dim = first.embedding_dim
        self.base = first.base
        self.missing_to_base = first.missing_to_base

    def forward(
        self,
        user: torch.Tensor,
        item: torch.Tensor,
        context: torch.Tensor,
        embedding: torch.Tensor | None = None,
        tier: torch.Tensor | None = None,
        user_stats: torch.Tensor | None = None,
        recent_pos: torch.Tensor | None = None,
    ) -> torch.Tensor:
        z1 = self.first(
            user,
            item,
            context,
            embedding=embedding,
            tier=tier,
            user_stats=user_stats,
            recent_pos=recent_pos,
        )
        features = (
            {"user_stats": user_stats, "recent_pos": recent_pos}
            if self.second.user_features
            else {}
        )
        z2 = self.second(user, item, context, **features)
        bound = LOGIT_BOUND  # as models.blend clips the probabilities it blends
        z1, z2 = z1.clamp(-bound, bound), z2.clamp(-bound, bound)
        return self.blend.a * z1 + self.blend.b * z2 + self.blend.c

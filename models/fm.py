"""The foundation model (FM): a target-aware sequence model over the user's history.

Architecture (DIN/HSTU-like, small enough for a 2-core CPU):

1. Each history entry is a token ``item ⊕ label ⊕ time-gap`` (summed embeddings), so the FM
   knows what the user engaged with, what they skipped, and how long ago.
2. Self-attention blocks (pre-norm transformer layers, ``layers`` of them) let history entries
   see each other; optionally causal (each entry sees only older ones) with learned recency
   positions, which is what next-interaction pretraining (``models.seqrec.pretrain``) needs:
   every position then predicts the step after it, and the newest position is the user.
3. **Target attention**: the target item queries the tokens (multi-head, masked); a learned
   "null" token is always present so an empty history (a new user) is well defined and
   exported graphs never divide by zero.
4. **Lasting-taste summaries** that survive stale inputs (design §7): means of the positive and
   of the negative history items, the smoothed positive rate and the log history length.
5. An MLP trunk; its last shared layer (``d`` units, default 64) is the **interaction
   embedding** shipped to the VMs; a linear CTR head on it gives the FM's logit.
6. Training adds an HSTU-style generative objective: from the history alone, pick the impression's
   item among the batch's items (in-batch softmax). It teaches item embeddings which items go
   together from *every* impression, not only from sparse positive labels; it is not exported.

``forward`` returns ``(embedding [B, d], logit [B])`` — the two ONNX outputs.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from models.features import N_GAP_BUCKETS, N_LABEL_TOKENS

INIT_STD = 0.05
FM_INPUTS = ("target_item", "hist_item", "hist_label", "hist_gap")
FM_OUTPUTS = ("embedding", "logit")


class FoundationModel(nn.Module):
    """Target-aware history encoder + MLP trunk + CTR head."""

    def __init__(
        self,
        n_items: int,
        item_dim: int = 32,
        hidden: int = 128,
        dim: int = 64,
        heads: int = 2,
        dropout: float = 0.1,
        self_attention: bool = True,
        layers: int = 1,
        causal: bool = False,
        max_len: int = 0,
    ) -> None:
        super().__init__()
        if item_dim % heads:
            raise ValueError(f"item_dim {item_dim} must be divisible by heads {heads}")
        if layers < 1:
            raise ValueError(f"layers must be at least 1, got {layers}")
        self.heads = heads
        self.item = nn.Embedding(n_items, item_dim, padding_idx=0)
        self.label = nn.Embedding(N_LABEL_TOKENS, item_dim, padding_idx=0)
        self.gap = nn.Embedding(N_GAP_BUCKETS, item_dim, padding_idx=0)
        self.item_bias = nn.Embedding(n_items, 1, padding_idx=0)
        self.null_token = nn.Parameter(torch.zeros(1, 1, item_dim))
        self.self_attn = _SelfAttention(item_dim, heads, causal) if self_attention else None
        #: blocks after the first (the first keeps its name: older checkpoints still load)
        self.more_blocks = nn.ModuleList(
            [
                _SelfAttention(item_dim, heads, causal)
                for _ in range(layers - 1 if self_attention else 0)
            ]
        )
        #: the pretrained (causal) FM's output norm before next-step scoring, as in SASRec
        self.seq_norm = nn.LayerNorm(item_dim) if causal else None
        #: learned recency positions (0 = the newest entry); none when ``max_len`` is 0
        self.position = nn.Embedding(max_len, item_dim) if max_len > 0 else None
        self.dropout = nn.Dropout(dropout)
        self.q = nn.Linear(item_dim, item_dim)
        self.k = nn.Linear(item_dim, item_dim)
        self.v = nn.Linear(item_dim, item_dim)
        n_feat = 6 * item_dim + 3
        self.trunk = nn.Sequential(
            nn.Linear(n_feat, hidden),
            nn.ReLU(),
            nn.Linear(hidden, dim),
            nn.ReLU(),
        )
        self.head = nn.Linear(dim, 1)
        self.user_proj = nn.Linear(item_dim, item_dim)
        nn.init.normal_(self.item.weight, std=INIT_STD)
        nn.init.normal_(self.label.weight, std=0.05)
        nn.init.normal_(self.gap.weight, std=0.05)
        nn.init.zeros_(self.item_bias.weight)

    def forward(
        self,
        target_item: torch.Tensor,  # int64 [B]
        hist_item: torch.Tensor,  # int64 [B, L]
        hist_label: torch.Tensor,  # int64 [B, L] (0 pad, 1 neg, 2 pos)
        hist_gap: torch.Tensor,  # int64 [B, L] (0 pad)
    ) -> tuple[torch.Tensor, torch.Tensor]:
        embedding, logit, _ = self.encode(target_item, hist_item, hist_label, hist_gap)
        return embedding, logit

    def encode(
        self,
        target_item: torch.Tensor,
        hist_item: torch.Tensor,
        hist_label: torch.Tensor,
        hist_gap: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(embedding, logit, next-item scores [B, B])``; the scores feed the training-only
        auxiliary loss (in-batch softmax: row i's user should pick row i's target item)."""
        state = self.user_state(hist_item, hist_label, hist_gap)
        embedding, logit = self.decode(target_item, *state)
        tokens, mask = state[0], state[1]
        # target-independent user vector: what the history alone says the user will engage with
        n_tok = mask.sum(1, keepdim=True)
        user = self.user_proj((tokens * mask.unsqueeze(-1)).sum(1) / n_tok.clamp(min=1.0))
        next_item = user @ self.item(target_item).T
        return embedding, logit, next_item

    def user_state(
        self, hist_item: torch.Tensor, hist_label: torch.Tensor, hist_gap: torch.Tensor
    ) -> tuple[torch.Tensor, ...]:
        """The target-independent half: what the FM knows of the user before it sees an item.

        ``(tokens [B, L, D], mask [B, L], pos_mean [B, D], neg_mean [B, D], pos_rate [B, 1],
        log_n [B, 1])``. Stored per user, it lets :meth:`decode` give the FM's output for any
        item without the history (issue 22's "user state × item decoder" tier).
        """
        mask = (hist_label > 0).to(torch.float32)  # [B, L]
        item_e = self.item(hist_item)
        tokens = self.tokens(hist_item, hist_label, hist_gap, mask)
        pos = (hist_label == 2).to(torch.float32)
        neg = (hist_label == 1).to(torch.float32)
        n_pos = pos.sum(dim=1, keepdim=True)
        n_neg = neg.sum(dim=1, keepdim=True)
        pos_mean = (item_e * pos.unsqueeze(-1)).sum(1) / n_pos.clamp(min=1.0)
        neg_mean = (item_e * neg.unsqueeze(-1)).sum(1) / n_neg.clamp(min=1.0)
        n = n_pos + n_neg
        pos_rate = (n_pos + 1.0) / (n + 2.0)  # Laplace-smoothed: 0.5 for an empty history
        return tokens, mask, pos_mean, neg_mean, pos_rate, torch.log1p(n)

    def tokens(
        self,
        hist_item: torch.Tensor,
        hist_label: torch.Tensor,
        hist_gap: torch.Tensor,
        mask: torch.Tensor,
    ) -> torch.Tensor:
        """The history entries after the self-attention blocks ``[B, L, D]`` (0 at padding)."""
        tokens = self.item(hist_item) + self.label(hist_label) + self.gap(hist_gap)
        if self.position is not None:
            length = hist_item.shape[1]
            recency = torch.arange(length - 1, -1, -1).clamp(max=self.position.num_embeddings - 1)
            tokens = tokens + self.position(recency)[None, :, :] * mask.unsqueeze(-1)
        if self.self_attn is not None:
            tokens = self.self_attn(tokens, mask)
            for block in self.more_blocks:
                tokens = block(tokens, mask)
        return tokens

    def next_item_scores(self, tokens: torch.Tensor) -> torch.Tensor:
        """Scores of every vocabulary item as the step after each position ``[B, L, V]``
        (tied item embeddings, as SASRec): the pretraining objective, and the FM's ranking."""
        if self.seq_norm is not None:
            tokens = self.seq_norm(tokens)
        return self.user_proj(tokens) @ self.item.weight.T

    def decode(
        self,
        target_item: torch.Tensor,
        tokens: torch.Tensor,
        mask: torch.Tensor,
        pos_mean: torch.Tensor,
        neg_mean: torch.Tensor,
        pos_rate: torch.Tensor,
        log_n: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The target-aware half: ``(embedding [B, d], logit [B])`` of ``target_item`` from a
        :meth:`user_state` (target attention, summaries, trunk, head)."""
        target = self.item(target_item)  # [B, D]
        attended = self._target_attention(target, tokens, mask)
        feats = torch.cat(
            [
                target,
                attended,
                target * attended,
                pos_mean,
                neg_mean,
                target * pos_mean,
                pos_rate,
                log_n,
                self.item_bias(target_item),
            ],
            dim=1,
        )
        embedding = self.trunk(self.dropout(feats))
        logit = self.head(embedding).squeeze(-1)
        return embedding, logit

    def _target_attention(
        self, target: torch.Tensor, tokens: torch.Tensor, mask: torch.Tensor
    ) -> torch.Tensor:
        b, _, dm = tokens.shape
        h = self.heads
        dh = dm // h
        keys = torch.cat([self.null_token.expand(b, 1, dm), tokens], dim=1)  # [B, L+1, D]
        full_mask = torch.cat([torch.ones(b, 1, dtype=mask.dtype), mask], dim=1)
        q = self.q(target).view(b, h, 1, dh)
        k = self.k(keys).view(b, -1, h, dh).transpose(1, 2)  # [B, h, L+1, dh]
        v = self.v(keys).view(b, -1, h, dh).transpose(1, 2)
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(dh)  # [B, h, 1, L+1]
        scores = scores.masked_fill(full_mask[:, None, None, :] == 0, -1e9)
        out = torch.softmax(scores, dim=-1) @ v  # [B, h, 1, dh]
        return out.reshape(b, dm)


class _SelfAttention(nn.Module):
    """One pre-norm transformer block over the history; padded tokens attend only to themselves."""

    def __init__(self, dim: int, heads: int, causal: bool = False) -> None:
        super().__init__()
        self.heads = heads
        self.causal = causal
        self.norm1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim)
        self.ff = nn.Sequential(nn.Linear(dim, 2 * dim), nn.ReLU(), nn.Linear(2 * dim, dim))

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, length, dm = x.shape
        h = self.heads
        dh = dm // h
        qkv = self.qkv(self.norm1(x)).view(b, length, 3, h, dh).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]  # [B, h, L, dh]
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(dh)
        eye = torch.eye(length, dtype=mask.dtype)
        keys = mask[:, None, :]  # [B, 1, L]
        if self.causal:  # an entry sees the older ones only (histories are oldest first)
            keys = keys * torch.tril(torch.ones(length, length, dtype=mask.dtype))[None, :, :]
        allowed = torch.clamp(keys + eye[None, :, :], max=1.0)  # [B, L, L]
        scores = scores.masked_fill(allowed[:, None, :, :] == 0, -1e9)
        att = torch.softmax(scores, dim=-1) @ v  # [B, h, L, dh]
        x = x + self.proj(att.transpose(1, 2).reshape(b, length, dm))
        x = x + self.ff(self.norm2(x))
        return x * mask.unsqueeze(-1)


def state_width(history_len: int, item_dim: int) -> int:
    """Floats in one flattened user state (see :func:`flatten_state`)."""
    return history_len * item_dim + history_len + 2 * item_dim + 2


def flatten_state(state: tuple[torch.Tensor, ...]) -> torch.Tensor:
    """``user_state``'s tensors as one float32 row per user ``[B, state_width]``, in the order
    tokens, mask, pos_mean, neg_mean, pos_rate, log_n: the value a store keeps per user."""
    tokens, mask, pos_mean, neg_mean, pos_rate, log_n = state
    return torch.cat([tokens.flatten(1), mask, pos_mean, neg_mean, pos_rate, log_n], dim=1)


def unflatten_state(
    flat: torch.Tensor, history_len: int, item_dim: int
) -> tuple[torch.Tensor, ...]:
    """The inverse of :func:`flatten_state`."""
    sizes = [history_len * item_dim, history_len, item_dim, item_dim, 1, 1]
    tokens, mask, pos_mean, neg_mean, pos_rate, log_n = torch.split(flat, sizes, dim=1)
    return (
        tokens.reshape(-1, history_len, item_dim),
        mask,
        pos_mean,
        neg_mean,
        pos_rate,
        log_n,
    )


class UserStateEncoder(nn.Module):
    """Exportable: history tensors → flattened user state ``[B, state_width]``."""

    def __init__(self, fm: FoundationModel) -> None:
        super().__init__()
        self.fm = fm

    def forward(
        self, hist_item: torch.Tensor, hist_label: torch.Tensor, hist_gap: torch.Tensor
    ) -> torch.Tensor:
        return flatten_state(self.fm.user_state(hist_item, hist_label, hist_gap))


class StateDecoder(nn.Module):
    """Exportable: (target item, flattened user state) → ``(embedding, logit)``, i.e. the FM's
    output for that item with the history the state was computed from."""

    def __init__(self, fm: FoundationModel, history_len: int) -> None:
        super().__init__()
        self.fm = fm
        self.history_len = history_len

    def forward(
        self, target_item: torch.Tensor, state: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        dim = self.fm.item.embedding_dim
        return self.fm.decode(target_item, *unflatten_state(state, self.history_len, dim))

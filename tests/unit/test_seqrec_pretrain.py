"""The FM's next-interaction pretraining learns sequential structure; the reference's files."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from models.data.loaders import Interactions
from models.seqrec.pretrain import PretrainConfig, metrics, pretrain, rank_targets, sequence_loss
from models.seqrec.reference import MARK, ReferenceFailed, parse_output, write_atomic
from models.seqrec.sequences import Sequences, from_interactions, split_points, window

N_ITEMS = 40


def cyclic(users: int = 48, steps: int = 14, seed: int = 0) -> Sequences:
    """Each user walks the items in a cycle (item k is always followed by k + 1) from a random
    start: the next item is a function of the last one, which no popularity count can see."""
    rng = np.random.default_rng(seed)
    rows = []
    for u in range(users):
        start = int(rng.integers(N_ITEMS))
        for t in range(steps):
            rows.append((u, (start + t) % N_ITEMS, u * 1000 + t, int(rng.random() < 0.5)))
    rows.sort(key=lambda r: r[2])
    u, i, t, y = (np.array(c, np.int64) for c in zip(*rows, strict=True))
    return from_interactions(Interactions("cyclic", u, i, t * 60_000, y.astype(np.int8)))


SMALL = PretrainConfig(
    history_len=8,
    item_dim=16,
    layers=1,
    heads=2,
    hidden=32,
    dim=16,
    dropout=0.0,
    batch_users=16,
    lr=1e-2,
    max_epochs=40,
    patience=40,
    threads=1,
)


def test_pretraining_learns_the_next_step() -> None:
    seqs = cyclic()
    trained = pretrain(seqs, SMALL)
    _, test = split_points(seqs)
    got = metrics(rank_targets(trained.model, seqs, test, SMALL.history_len))
    assert got["hr@10"] > 0.9, got  # chance: 10 / 40
    assert trained.best_epoch >= 1 and trained.parameters > 0


def test_untrained_model_is_near_chance() -> None:
    """The yardstick's ranking is not rigged: the same model before training ranks at chance."""
    from models.seqrec.pretrain import build_fm

    seqs = cyclic()
    torch.manual_seed(0)
    model = build_fm(seqs.n_items, SMALL)
    _, test = split_points(seqs)
    got = metrics(rank_targets(model, seqs, test, SMALL.history_len))
    assert got["hr@10"] < 0.5, got


def test_sampled_softmax_matches_the_full_one_in_spirit() -> None:
    """With fewer negatives than items the loss is a sampled softmax: finite, smaller than the
    full one (fewer competitors), and it has gradients for the target's embedding."""
    from models.seqrec.pretrain import build_fm

    seqs = cyclic()
    model = build_fm(seqs.n_items, SMALL)
    users = np.arange(8)
    b = window(seqs, users, np.full(8, 10), SMALL.history_len)
    rng = np.random.default_rng(0)
    full = sequence_loss(model, b, negatives=10_000, rng=rng)
    sampled = sequence_loss(model, b, negatives=5, rng=rng)
    assert torch.isfinite(sampled) and float(sampled.detach()) < float(full.detach())
    sampled.backward()
    assert model.item.weight.grad is not None and float(model.item.weight.grad.abs().sum()) > 0


def test_atomic_file_orders_each_users_steps(tmp_path: Path) -> None:
    seqs = cyclic(users=2, steps=4)
    path = write_atomic(seqs, tmp_path)
    lines = path.read_text().splitlines()
    assert lines[0] == "user_id:token\titem_id:token\ttimestamp:float"
    first = [ln.split("\t") for ln in lines[1:5]]
    assert [r[2] for r in first] == ["0", "1", "2", "3"]
    assert [int(r[1]) for r in first] == seqs.items[0].tolist()


def test_reference_output_is_parsed_or_refused() -> None:
    out = "noise\n" + MARK + json.dumps({"hr@10": 0.5, "ndcg@10": 0.3}) + "\n"
    assert parse_output(out)["ndcg@10"] == 0.3
    with pytest.raises(ReferenceFailed, match="no result line"):
        parse_output("Traceback: ...")

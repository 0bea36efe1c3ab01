"""Train and test RecBole's SASRec on one atomic file; print one JSON line of its figures.

Runs inside the reference environment (``infra/reference-venv.sh``), never imported by the
project: it needs RecBole only. Usage::

    python recbole_driver.py DATA_DIR DATASET MAX_LEN EPOCHS PATIENCE SEED

``DATA_DIR/DATASET/DATASET.inter`` holds ``user_id``, ``item_id`` and a ``timestamp`` that orders
each user's steps strictly, so RecBole's leave-last-out split (``LS: valid_and_test``, time
order) is the caller's own. Full ranking, HR@10 and NDCG@10, early stopping on validation
NDCG@10, everything else at RecBole's SASRec defaults (cross-entropy over all items).
"""

import json
import os
import sys
import time

os.environ.setdefault("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")  # RecBole 1.2.1 saves configs


def main(argv: list[str]) -> int:
    data_dir, dataset, max_len, epochs, patience, seed = argv
    import torch
    from recbole.config import Config
    from recbole.data import create_dataset, data_preparation
    from recbole.model.sequential_recommender import SASRec
    from recbole.trainer import Trainer
    from recbole.utils import init_logger, init_seed

    torch.set_num_threads(int(os.environ.get("SOLARIS_REFERENCE_THREADS", "2")))
    config = Config(
        model="SASRec",
        dataset=dataset,
        config_dict={
            "data_path": data_dir,
            "checkpoint_dir": os.path.join(data_dir, "checkpoints"),
            "load_col": {"inter": ["user_id", "item_id", "timestamp"]},
            "MAX_ITEM_LIST_LENGTH": int(max_len),
            "eval_args": {"split": {"LS": "valid_and_test"}, "order": "TO", "mode": "full"},
            "metrics": ["Hit", "NDCG"],
            "topk": [10],
            "valid_metric": "NDCG@10",
            "train_neg_sample_args": None,
            "epochs": int(epochs),
            "stopping_step": int(patience),
            "seed": int(seed),
            "reproducibility": True,
            "use_gpu": False,
            "show_progress": False,
            "log_wandb": False,
        },
    )
    init_seed(config["seed"], config["reproducibility"])
    init_logger(config)  # its epoch lines go to stderr (the caller's progress) and ./log
    data = create_dataset(config)
    train, valid, test = data_preparation(config, data)
    model = SASRec(config, train.dataset).to(config["device"])
    trainer = Trainer(config, model)
    t0 = time.monotonic()
    _, valid_result = trainer.fit(train, valid, saved=True, show_progress=False)
    train_s = time.monotonic() - t0
    result = trainer.evaluate(test, load_best_model=True, show_progress=False)
    out = {
        "implementation": "RecBole 1.2.1 SASRec",
        "hr@10": float(result["hit@10"]),
        "ndcg@10": float(result["ndcg@10"]),
        "train_seconds": round(train_s, 1),
        "valid": {
            "hr@10": float(valid_result["hit@10"]),
            "ndcg@10": float(valid_result["ndcg@10"]),
        },
        "parameters": sum(p.numel() for p in model.parameters()),
        "users": int(data.user_num - 1),
        "items": int(data.item_num - 1),
        "interactions": int(data.inter_num),
        "config": {
            k: config[k]
            for k in (
                "MAX_ITEM_LIST_LENGTH",
                "hidden_size",
                "n_layers",
                "n_heads",
                "loss_type",
                "learning_rate",
                "train_batch_size",
                "epochs",
                "stopping_step",
            )
        },
    }
    print("SOLARIS_REFERENCE " + json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

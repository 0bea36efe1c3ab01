"""The FM as a sequential recommender: next-item pretraining and an external yardstick.

``sequences``: per-user interaction sequences and the leave-last-out split; ``ranking``: full
ranking metrics (HR@K, NDCG@K); ``pretrain``: the FM's self-supervised next-interaction
objective; ``reference``: a published SASRec (RecBole) trained on the same split in its own
environment; ``benchmark``: both side by side (``solaris fm benchmark``).
"""

"""Data for SOLARIS: real-dataset loaders, the synthetic generator, recorded-traffic files.

Layering (no cycles): ``errors`` → ``loaders`` / ``columns`` → ``traffic`` → ``stats`` →
``synthetic`` / ``convert``. Nothing here imports torch.
"""

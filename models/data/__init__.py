"""Data for SOLARIS: real-dataset loaders, the synthetic generator, recorded-traffic files.

Layering (no cycles): ``errors`` → ``loaders`` (:class:`Interactions`), ``columns``
(:class:`Requests`, :class:`Impressions`) → ``traffic`` (the Avro file), ``stats`` →
``retrieval`` → ``convert`` (log → traffic) and ``synthetic`` (generated traffic).
Nothing here imports torch.
"""

"""The demo report: a timeline sampler, its figures, the self-contained HTML page, and a
headless-browser check of it (see :mod:`.page`)."""

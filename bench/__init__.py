"""SOLARIS benchmarks: each measures a floor and the thing under test side by side, in one run.

``solaris bench serve|fm|store|pipeline|all`` (``make bench``) writes ``bench/results/*.json`` and
prints Markdown tables; ``--smoke`` is the seconds-long variant the test suite runs.
"""

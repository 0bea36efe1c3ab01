"""Errors of the store package; backends translate client errors into these at the boundary."""

from __future__ import annotations


class StoreError(Exception):
    """Root of every store error."""


class StoreUnavailable(StoreError):
    """The store could not be reached or refused the command (connection refused, reset, ...)."""


class StoreRefused(StoreUnavailable):
    """The store answered and refused the command (no permission, wrong key type, out of
    memory, a read-only replica): sending the same command again changes nothing until someone
    acts, so writers do not retry it in place (the agent's batch guard reruns the batch a few
    times, then the worker stops without acking it)."""


class ReplicaShortfall(StoreUnavailable):
    """A write was applied by the master but fewer replicas than asked confirmed it within the
    wait (``WAIT``): not acknowledged, so the caller retries it (writes are idempotent); the
    master alone may lose it in a failover."""


class StoreTimeout(StoreError):
    """The store did not answer within the deadline."""


class CorruptValue(StoreError):
    """A stored value could not be decoded (wrong format byte, truncated)."""

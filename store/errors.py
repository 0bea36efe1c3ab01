"""Errors of the store package; backends translate client errors into these at the boundary."""

from __future__ import annotations


class StoreError(Exception):
    """Root of every store error."""


class StoreUnavailable(StoreError):
    """The store could not be reached or refused the command (connection refused, reset, ...)."""


class StoreTimeout(StoreError):
    """The store did not answer within the deadline."""


class CorruptValue(StoreError):
    """A stored value could not be decoded (wrong format byte, truncated)."""

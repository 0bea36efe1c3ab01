"""Errors of the data package; all derive from :class:`DataError`."""

from __future__ import annotations


class DataError(Exception):
    """Root of every error raised by ``models.data``."""


class DatasetNotFound(DataError):
    """The dataset's files are not where the caller (settings / ``--data-dir``) said."""


class UnknownFormat(DataError):
    """A file's format could not be recognised from its name and none was given."""


class TrafficFormatError(DataError):
    """A recorded-traffic file is malformed, out of order, or not a SOLARIS traffic file."""


class OneClassLabels(DataError):
    """Every impression has the same label (a click log without negatives): no model can be
    trained or judged on it (log-loss, NE, AUC and transfer ratios are undefined)."""


class ConfigError(DataError):
    """A generator / converter configuration value is out of its valid range."""

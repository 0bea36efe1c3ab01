"""Errors of the models package (outside ``models.data``); all derive from :class:`ModelError`."""

from __future__ import annotations


class ModelError(Exception):
    """Root of every error raised by SOLARIS model code (training, bundles, inference)."""


class InferenceError(ModelError):
    """An onnxruntime session could not be created or failed on a batch (wraps ORT errors)."""


class InputError(ModelError, ValueError):
    """A batch given to a runner has the wrong shape, dtype or values."""


class BundleError(ModelError):
    """A model bundle directory is missing files or its metadata is inconsistent."""

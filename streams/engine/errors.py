"""The one error type of the engine's steps for data they cannot process.

A step raises :class:`StepError` (a ``ValueError``) when an input is wrong: a verified message
whose history is not oldest first, an embedding of the driver's own FM with another dimension,
an FM output that is not finite. The live agents dead-letter that message alone and go on; the
simulator refuses it the same way. Anything else a step raises is not about the data (a bug, or
an infrastructure error handled by the batch guard).
"""

from __future__ import annotations


class StepError(ValueError):
    """Data a step cannot process (the message is dead-lettered alone, with this text)."""

"""Errors raised by the schemas package; all derive from :class:`SchemaError`."""

from __future__ import annotations


class SchemaError(Exception):
    """Root of every error about the shape or content of a record or message."""

    #: Short machine-readable reason code, used as the dead-letter reason and metric label.
    reason: str = "schema_error"


class UnknownSchema(SchemaError):
    """The message header names a schema id/version this build does not know."""

    reason = "unknown_schema"


class BadHeader(SchemaError):
    """The message is too short or does not start with the SOLARIS magic byte."""

    reason = "bad_header"


class DecodeError(SchemaError):
    """The Avro body could not be decoded with the schema its header names."""

    reason = "decode_error"


class WrongRecordType(SchemaError):
    """The message decoded fine but is not the record type the consumer expects."""

    reason = "wrong_record_type"


class InvalidField(SchemaError):
    """A decoded or constructed record breaks a field-level rule (range, size, NaN, ...)."""

    reason = "invalid_field"

    def __init__(self, record: str, field: str, message: str) -> None:
        super().__init__(f"{record}.{field}: {message}")
        self.record = record
        self.field = field

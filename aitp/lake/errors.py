"""Errors of the lake a user can hit; each message names the fix, on one line."""

from __future__ import annotations

from aitp.errors import AitpError


class LakeError(AitpError):
    """Base of the lake's user-facing errors."""


class UnknownTableError(LakeError):
    """A table name the lake does not define."""


class UnknownPartitionError(LakeError):
    """An experiment or iteration with no committed data."""


class SchemaError(LakeError):
    """Rows that do not fit a table's schema (an unknown column, a wrong type, a missing key)."""


class ReadOnlyQueryError(LakeError):
    """A statement given to `aitp sql` that could write, attach or load something."""


class QueryError(LakeError):
    """A query that DuckDB could not parse, bind or run."""


class LakeNotWholeError(LakeError):
    """An iteration about to be marked done while shards a repair quarantined are still not committed again."""

"""Read-only SQL for `aitp sql`: DuckDB's own parser decides what a statement is, and only reads pass.

Two locks, not one: statements are classified by DuckDB's parser (never by keyword regexes alone),
and the connection they then run on has external access off and its configuration locked
(`connect(read_only=True)`), so even a statement the parser let through cannot write a file.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

import duckdb

from aitp.lake.errors import QueryError, ReadOnlyQueryError

READ_ONLY_PRAGMAS = frozenset(
    {
        "table_info",
        "show",
        "show_tables",
        "show_tables_expanded",
        "show_databases",
        "database_list",
        "database_size",
        "version",
        "platform",
        "functions",
        "collations",
        "user_agent",
    }
)
_LEADING_NOISE = r"^(?:\s+|--[^\n]*(?:\n|$)|/\*.*?\*/)*"
_PRAGMA_NAME = re.compile(_LEADING_NOISE + r"PRAGMA\s+([A-Za-z_][A-Za-z0-9_]*)", re.IGNORECASE | re.DOTALL)
_EXPLAIN_HEAD = re.compile(
    _LEADING_NOISE + r"EXPLAIN(?:\s+ANALYZE)?(?:\s*\([^)]*\))?\s+(.*)$", re.IGNORECASE | re.DOTALL
)
_FIRST_WORD = re.compile(_LEADING_NOISE + r"([A-Za-z]+)", re.DOTALL)
_HINT = "`aitp sql` only reads (SELECT, WITH, FROM, DESCRIBE, SHOW, SUMMARIZE, EXPLAIN, read-only PRAGMAs)"


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _parse(sql: str) -> list[duckdb.Statement]:
    parser = duckdb.connect(":memory:")
    try:
        return parser.extract_statements(sql)
    except duckdb.Error as exc:
        raise QueryError(f"cannot parse the query: {_one_line(exc)}") from exc
    finally:
        parser.close()


def _check(statement: duckdb.Statement, depth: int = 0) -> None:
    text = statement.query
    try:
        kind = statement.type
    except ValueError as exc:  # a statement kind this duckdb's Python API cannot name
        raise ReadOnlyQueryError(f"statement kind not recognised ({exc}): {_HINT}") from exc
    if kind == duckdb.StatementType.SELECT:
        return
    if kind == duckdb.StatementType.PRAGMA:
        match = _PRAGMA_NAME.match(text)
        name = match.group(1).lower() if match else "?"
        if name in READ_ONLY_PRAGMAS:
            return
        raise ReadOnlyQueryError(f"PRAGMA {name} is refused: {_HINT}")
    if kind == duckdb.StatementType.EXPLAIN and depth == 0:
        # EXPLAIN ANALYZE runs its statement, so the statement itself must pass.
        match = _EXPLAIN_HEAD.match(text)
        inner = _parse(match.group(1)) if match else []
        if len(inner) != 1:
            raise ReadOnlyQueryError(f"this EXPLAIN is refused: {_HINT}")
        _check(inner[0], depth + 1)
        return
    verb = _FIRST_WORD.match(text)
    name = verb.group(1).upper() if verb else getattr(kind, "name", str(kind))
    raise ReadOnlyQueryError(f"{name} statements are refused: {_HINT}")


def read_only_statements(sql: str) -> list[str]:
    """The statements of `sql`, each checked read-only; ReadOnlyQueryError names the first that is not."""
    statements = _parse(sql)
    if not statements:
        raise QueryError("the query is empty: pass a SELECT, or no query to list the tables")
    for statement in statements:
        _check(statement)
    return [s.query for s in statements]


# Given a read error, a message naming the file at fault and the fix (None: no file found at fault).
ReadErrorExplainer = Callable[[Exception], str | None]


def run_read_only(
    con: duckdb.DuckDBPyConnection, sql: str, batch: int = 10_000, explain_read: ReadErrorExplainer | None = None
) -> Iterator[tuple[list[str], Iterator[tuple]]]:
    """Check every statement first, then run each, yielding (column names, row batches iterator)."""
    for text in read_only_statements(sql):
        try:
            cursor = con.execute(text)
        except duckdb.Error as exc:
            raise QueryError(_explain_error(exc, explain_read)) from exc
        columns = [d[0] for d in cursor.description or []]
        yield columns, _rows(cursor, batch, explain_read)


def _rows(cursor: duckdb.DuckDBPyConnection, batch: int, explain_read: ReadErrorExplainer | None) -> Iterator[tuple]:
    while True:
        try:
            chunk = cursor.fetchmany(batch)
        except duckdb.Error as exc:
            raise QueryError(_explain_error(exc, explain_read)) from exc
        if not chunk:
            return
        yield from chunk


# Errors of the query itself (its text, names, types or values): no file is at fault.
_QUERY_FAULTS = tuple(
    getattr(duckdb, name)
    for name in (
        "ParserException",
        "SyntaxException",
        "BinderException",
        "ConversionException",
        "OutOfRangeException",
        "NotImplementedException",
        "TypeMismatchException",
        "InterruptException",
        "OutOfMemoryException",
    )
    if hasattr(duckdb, name)
)


def _explain_error(exc: duckdb.Error, explain_read: ReadErrorExplainer | None = None) -> str:
    first = _one_line(str(exc).split("\n")[0] if "\n" in str(exc) else exc)
    if isinstance(exc, duckdb.CatalogException):
        return f"{first}: run `aitp sql` with no query to list the tables and views"
    if isinstance(exc, duckdb.PermissionException):
        return f"{first}: `aitp sql` reads only the lake's committed files"
    if "aitp lake check" in str(exc):  # an unreadable table's view already names the file and the fix
        return _one_line(exc)
    if isinstance(exc, _QUERY_FAULTS):
        return _one_line(exc)
    # a read that failed mid-file (DuckDB's decoders often say nothing of which file): find it
    named = explain_read(exc) if explain_read is not None else None
    if named is not None:
        return named
    if isinstance(exc, (duckdb.IOException, duckdb.InvalidInputException)):
        return f"{_one_line(exc)}: run `aitp lake check` (and `--repair` to quarantine bad files)"
    return _one_line(exc)

"""HTML cells and tables shared by the report's sections (the experiment page and its proof section)."""

from __future__ import annotations

from collections.abc import Collection
from datetime import UTC, datetime
from html import escape
from typing import Any


def text(value: Any) -> str:
    """Escaped text of a cell; a dash for missing values."""
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.3f}"
    if isinstance(value, datetime):
        return escape(value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC"))
    return escape(str(value))


def table(headers: list[str], rows: list[list[Any]], numeric: Collection[int] = ()) -> str:
    """An HTML table of already-rendered cells; `numeric` columns align right."""
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join(
        "<tr>" + "".join(f"<td{' class=num' if i in numeric else ''}>{cell}</td>" for i, cell in enumerate(r)) + "</tr>"
        for r in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"

"""Query results printed as they stream, and a query that stops on Ctrl-C or at its time limit.

`aitp sql` once built its table in memory before printing a line (a large result was killed at a memory
cap: `benchmarks/results/2026-11-28-hostile-inputs.md`) and could not be stopped: DuckDB runs a query in
C with the GIL released, where Python's SIGINT handler never runs. So here every format prints batch by
batch (a table takes its column widths from the first batch), and the query runs in a worker thread
while the main thread waits on it, catches SIGINT and watches the clock, and calls DuckDB's
`interrupt()` on either.
"""

from __future__ import annotations

import csv
import itertools
import json
import signal
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, TextIO

from aitp.errors import AitpError

MAX_CELL = 80
TABLE_BATCH = 1000  # rows whose cells set a table's column widths; later longer cells overflow their column
STOP_GRACE_S = 5.0  # how long a stopped query may take to notice before the command gives up on it


class QueryStoppedError(AitpError):
    """A query stopped by Ctrl-C or by its time limit."""


def cell(value: Any) -> str:
    """A value as one table cell: one line, at most MAX_CELL characters."""
    if value is None:
        return "NULL"
    if isinstance(value, float):
        text = format(value, ".6g")
    elif isinstance(value, (list, dict)):
        text = json.dumps(value, default=str)
    else:
        text = str(value)
    text = " ".join(text.split()) if "\n" in text else text
    return text if len(text) <= MAX_CELL else text[: MAX_CELL - 1] + "…"


def print_table(columns: list[str], rows: Iterable[tuple], out: TextIO) -> None:
    """An aligned table, printed as rows arrive; widths come from the header and the first TABLE_BATCH rows."""
    rows = iter(rows)
    first = [[cell(v) for v in row] for row in itertools.islice(rows, TABLE_BATCH)]
    widths = [max([len(c)] + [len(r[i]) for r in first]) for i, c in enumerate(columns)]

    def line(cells: list[str]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip() + "\n"

    out.write(line(columns))
    out.write("  ".join("-" * w for w in widths) + "\n")
    count = 0
    for cells in itertools.chain(first, ([cell(v) for v in row] for row in rows)):
        out.write(line(cells))
        count += 1
    out.write(f"({count} row{'s' if count != 1 else ''})\n")


def print_csv(columns: list[str], rows: Iterable[tuple], out: TextIO) -> None:
    """CSV with a header row; lists and mappings as JSON."""
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow([json.dumps(v, default=str) if isinstance(v, (list, dict)) else v for v in row])


def print_json(columns: list[str], rows: Iterable[tuple], out: TextIO) -> None:
    """A JSON array of one object per row, one row a line."""
    out.write("[")
    for n, row in enumerate(rows):
        out.write(("," if n else "") + "\n " + json.dumps(dict(zip(columns, row)), default=str))
    out.write("\n]\n")


PRINTERS = {"table": print_table, "csv": print_csv, "json": print_json}


def run_stoppable(work: Callable[[], None], interrupt: Callable[[], None], timeout_s: float) -> None:
    """Run `work` in a thread until done, Ctrl-C or `timeout_s` (0: no limit); stopping calls `interrupt`."""
    failure: list[BaseException] = []
    done = threading.Event()  # not Thread.join: on Python 3.11 a join cut by Ctrl-C marks a live thread stopped

    def target() -> None:
        try:
            work()
        except BaseException as exc:  # handed to the main thread, which raises it there
            failure.append(exc)
        finally:
            done.set()

    main = threading.current_thread() is threading.main_thread()
    # A shell's background job inherits SIGINT ignored; `kill -INT` must still stop the query.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler) if main else None
    started = time.monotonic()
    why = None
    try:
        threading.Thread(target=target, name="aitp-sql", daemon=True).start()
        while not done.is_set():
            left = None if timeout_s <= 0 else timeout_s - (time.monotonic() - started)
            if left is not None and left <= 0:
                why = f"stopped at --timeout {timeout_s:g} s: narrow it, or pass a larger --timeout (0: no limit)"
                break
            done.wait(0.2 if left is None else min(0.2, left))
    except KeyboardInterrupt:
        why = f"interrupted (Ctrl-C) after {time.monotonic() - started:.1f} s"
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
    if why is not None:
        interrupt()
        done.wait(STOP_GRACE_S)
        raise QueryStoppedError(f"query {why}")
    if failure:
        raise failure[0]

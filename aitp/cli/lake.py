"""`aitp sql`, `aitp export`, `aitp rescore`, `aitp lake check|vacuum|ls`: the trace lake from the shell."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import typer

from aitp.cli.app import app, read_text
from aitp.cli.query_output import PRINTERS, print_table, run_stoppable
from aitp.errors import BadInputError
from aitp.home import require_home

HOME_HELP = "Home directory or URI (default: $AITP_HOME, else ./data)."
SQL_FORMATS = ("table", "csv", "json")
DEFAULT_SQL_TIMEOUT_S = 300.0

lake_app = typer.Typer(help="Inspect and repair the trace lake.", no_args_is_help=True)
app.add_typer(lake_app, name="lake")


def _listing(described: list[tuple[str, str, list[tuple[str, str]]]]) -> Iterator[tuple]:
    for name, kind, columns in described:
        for column, type_ in columns:
            yield name, kind, column, type_


@app.command("sql")
def sql_command(
    query: str | None = typer.Argument(None, help="SQL to run (read-only); none lists tables and views."),
    file: Path | None = typer.Option(None, "-f", "--file", help="Read the SQL from this file."),
    home: str | None = typer.Option(None, "--home", help=HOME_HELP),
    output_format: str = typer.Option("table", "--format", help="table, csv or json."),
    timeout: float = typer.Option(
        DEFAULT_SQL_TIMEOUT_S, "--timeout", help="Stop the query and its output after this many seconds (0: no limit)."
    ),
) -> None:
    """Query the lake read-only with DuckDB: one view per table plus curated views. Ctrl-C stops a query."""
    from aitp.lake.sql_guard import read_only_statements, run_read_only
    from aitp.lake.views import connect, describe, explain_read_error

    if output_format not in SQL_FORMATS:
        raise BadInputError(f"unknown --format '{output_format}': use {', '.join(SQL_FORMATS)}")
    if not timeout >= 0:  # NaN too
        raise BadInputError(f"--timeout must be zero (no limit) or more seconds, got {timeout}")
    if query is not None and file is not None:
        raise BadInputError("pass the query as an argument or with -f FILE, not both")
    if file is not None:
        query = read_text(file, "-f")
    require_home(home)
    if query is not None:
        read_only_statements(query)  # refuse before opening anything
    con = connect(home, read_only=True)
    printer = PRINTERS[output_format]
    if query is None:
        described = describe(con)
        if output_format == "table":
            for name, kind, columns in described:
                print(f"{name} ({kind}): " + ", ".join(f"{c} {t}" for c, t in columns))
        else:
            printer(["name", "kind", "column", "type"], _listing(described), sys.stdout)
        return

    def print_results() -> None:
        results = run_read_only(con, query, explain_read=lambda e: explain_read_error(home, e))
        for n, (columns, rows) in enumerate(results):
            if n:
                sys.stdout.write("\n")
            printer(columns, rows, sys.stdout)
        sys.stdout.flush()

    run_stoppable(print_results, con.interrupt, timeout)


@app.command("export")
def export_command(
    experiment: str = typer.Option(..., "--experiment", help="Experiment to export."),
    iteration: int | None = typer.Option(None, "--iteration", help="Only this iteration."),
    output_format: str = typer.Option("atropos-jsonl", "--format", help="atropos-jsonl (the seed's dump)."),
    out: Path | None = typer.Option(None, "--out", "-o", help="Write here (default: stdout)."),
    kept_only: bool = typer.Option(False, "--kept-only", help="Only groups that went to training."),
    home: str | None = typer.Option(None, "--home", help=HOME_HELP),
) -> None:
    """Export rollouts grouped per item in the seed's atropos-jsonl dump format."""
    from aitp.lake.export import FORMATS, export_atropos

    require_home(home)
    if output_format not in FORMATS:
        raise BadInputError(f"unknown --format '{output_format}': use {', '.join(FORMATS)}")
    if out is None:
        stats = export_atropos(home, experiment, sys.stdout, iteration, kept_only)
    else:
        tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
        try:
            with tmp.open("w", encoding="utf-8") as stream:
                stats = export_atropos(home, experiment, stream, iteration, kept_only)
            tmp.replace(out)  # never leave a half-written export under the asked-for name
        finally:
            tmp.unlink(missing_ok=True)
    where = out if out is not None else "stdout"
    print(f"exported {stats.groups} groups ({stats.rollouts} rollouts) to {where}", file=sys.stderr)


@app.command("rescore")
def rescore_command(
    experiment: str = typer.Option(..., "--experiment", help="Experiment to re-score."),
    iteration: int | None = typer.Option(None, "--iteration", help="Only this iteration."),
    home: str | None = typer.Option(None, "--home", help=HOME_HELP),
) -> None:
    """Re-score stored rollouts with the current verifier into `rescores`; report changes per task."""
    from aitp.lake.catalog import as_lake, require_partition
    from aitp.lake.rescore import rescore
    from aitp.loop.writer_lock import writer_lock

    require_home(home)
    require_partition(as_lake(home), "rollouts", experiment, iteration)  # an unknown experiment: refused, no lock file
    with writer_lock(home, experiment):  # its `rescores` partitions are the experiment's: one writer at a time
        changes = rescore(home, experiment, iteration)
    columns = ["task", "rollouts", "raw_changed", "lenient_changed", "format_changed", "unscorable"]
    rows = [
        (c.task, c.n_rollouts, c.n_raw_changed, c.n_lenient_changed, c.n_format_changed, c.n_unscorable)
        for c in changes
    ]
    print_table(columns, rows, sys.stdout)
    print("originals untouched; compare them in the `rollouts_rescored` view of `aitp sql`")


@lake_app.command("check")
def check_command(
    repair: bool = typer.Option(False, "--repair", help="Move every problem file to the quarantine."),
    deep: bool = typer.Option(False, "--deep", help="Also decode every row group, not only verify checksums."),
    grace_seconds: float = typer.Option(600.0, "--grace-seconds", help="Ignore unlisted files younger than this."),
    home: str | None = typer.Option(None, "--home", help=HOME_HELP),
) -> None:
    """Verify committed files against their checksums; report corrupt, missing, orphan and half-written ones."""
    from aitp.lake.check import QUARANTINE_DIR, check_report
    from aitp.lake.storage import open_lake
    from aitp.loop.writer_lock import home_writer_lock

    require_home(home)
    if grace_seconds < 0:
        raise BadInputError(f"--grace-seconds must be zero or more, got {grace_seconds}")
    # A repair moves files and marks iterations under every experiment: it waits for no writer, it is refused
    # while one works (a run's half-written shard is not a problem to quarantine). A check only reads.
    with home_writer_lock(home) if repair else contextlib.nullcontext():
        report = check_report(home, repair=repair, deep=deep, grace_s=grace_seconds)
    for p in report.problems:
        print(f"{p.kind}\t{p.path}\t{p.detail}" + ("\t-> quarantined" if p.repaired else ""))
    for gap in report.gaps:
        print(
            f"gap\t{gap.table} of '{gap.experiment}' iteration {gap.iteration} (shard {gap.shard})\t"
            "quarantined by a repair and not regenerated yet"
        )
    checked = f"{report.verified} file(s) verified by checksum"
    if report.unverified:
        checked += f", {report.unverified} unverified (committed before checksums: footer read only)"
    if not report.problems and not report.gaps:
        print(f"lake ok ({checked})")
        return
    if repair and report.problems:  # what it moved is now a gap a resumed run fills
        lake = open_lake(home)
        print(f"moved {len(report.problems)} problem(s) under {lake.show(lake.path(QUARANTINE_DIR))}; nothing deleted")
        for experiment, iteration in report.marked:
            print(
                f"iteration {iteration} of '{experiment}' marked repaired: `aitp run --resume {experiment}` redoes it"
            )
        return
    if report.problems:
        print(f"{len(report.problems)} problem(s): run `aitp lake check --repair` to quarantine them", file=sys.stderr)
    else:
        behind = sorted({gap.experiment for gap in report.gaps})
        resume = " and ".join(f"`aitp run --resume {e}`" for e in behind)
        print(f"the lake is not whole: {len(report.gaps)} shard(s) to regenerate: run {resume}", file=sys.stderr)
    raise typer.Exit(1)


@lake_app.command("vacuum")
def vacuum_command(
    older_than_seconds: float = typer.Option(600.0, "--older-than-seconds", help="Keep files replaced more recently."),
    home: str | None = typer.Option(None, "--home", help=HOME_HELP),
) -> None:
    """Delete files that later commits replaced, once no reader can still be using them."""
    from aitp.lake.vacuum import vacuum_lake
    from aitp.loop.writer_lock import home_writer_lock

    require_home(home)
    if older_than_seconds < 0:
        raise BadInputError(f"--older-than-seconds must be zero or more, got {older_than_seconds}")
    with home_writer_lock(home):  # it deletes across experiments: no writer may be committing meanwhile
        deleted = vacuum_lake(home, older_than_seconds)
    for path in deleted:
        print(f"deleted\t{path}")
    print(f"{len(deleted)} replaced file(s) deleted")


@lake_app.command("ls")
def ls_command(
    table: str | None = typer.Option(None, "--table", help="Only this table."),
    home: str | None = typer.Option(None, "--home", help=HOME_HELP),
) -> None:
    """List committed partitions: table, experiment, iteration, shards, rows."""
    from aitp.lake.catalog import commits
    from aitp.lake.schemas import TABLES, schema_of

    require_home(home)
    tables = [table] if table else list(TABLES)
    rows = []
    for name in tables:
        schema_of(name)
        grouped: dict[tuple[str, int], list[Any]] = {}
        for c in commits(home, name):
            grouped.setdefault((c.experiment, c.iteration), []).append(c)
        for (exp, it), found in sorted(grouped.items()):
            rows.append((name, exp, it, len(found), sum(c.rows for c in found)))
    print_table(["table", "experiment", "iteration", "shards", "rows"], rows, sys.stdout)

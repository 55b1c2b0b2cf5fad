"""The home's SQLite tracking store (`mlflow.db`), made whole or not at all.

MLflow builds its schema in place: ~65 tables over a hundred migrations, not in one transaction.
A run killed (or a disk filled) during that left a half-made `mlflow.db` that every later run
tripped on (`duplicate column name`, `table ... already exists`), so one interruption bricked the
home. Here the schema is built in a hidden sibling file and linked into place only when complete
(a link, not a rename: two processes making it at once must not replace a store the other already
writes to). A half-made store left by older versions, holding no runs or models, is moved aside
and rebuilt; one that holds data and has an old schema is reported with the upgrade command.
MLflow's schema helpers are private; they are used here alone, so an MLflow upgrade breaks one module.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import time
from pathlib import Path

from aitp.atomic import _fsync_dir, staging_dir
from aitp.disk import free_bytes, human_bytes, names_full_disk
from aitp.errors import AitpError
from aitp.processes import pid_alive

MAKING = "making"  # label of the hidden sibling a store is built in


class TrackingStoreError(AitpError):
    """The SQLite tracking store could not be made, or holds data in a schema this MLflow cannot use."""


def sqlite_path(uri: str) -> Path | None:
    """The file of a `sqlite:///` tracking URI (None for servers, memory and other schemes)."""
    if not uri.startswith("sqlite:///"):
        return None
    path = uri.removeprefix("sqlite:///").split("?")[0]
    return Path(path) if path and path != ":memory:" else None


def prepare_store(path: Path) -> Path:
    """Make sure `path` is a complete MLflow store: built aside and linked in if missing, rebuilt if half-made."""
    path = Path(path)
    _remove_dead_stagings(path)
    if path.exists():
        revision, holds_data = _read(path)
        head = _head_revision()
        if revision == head:
            return path
        if holds_data:
            raise TrackingStoreError(
                f"the MLflow store {path} holds runs in schema {revision}, this MLflow uses {head}: back it up, then "
                f"run `mlflow db upgrade sqlite:///{path}` (or use the MLflow that made it)"
            )
        _move_aside(path)
    _build(path)
    return path


def _head_revision() -> str:
    from mlflow.store.db.utils import _get_latest_schema_revision

    return _get_latest_schema_revision()


DATA = {  # what a user made: a run, a registered model, an experiment beyond Default
    "runs": "SELECT 1 FROM runs LIMIT 1",
    "registered_models": "SELECT 1 FROM registered_models LIMIT 1",
    "experiments": "SELECT 1 FROM experiments WHERE name != 'Default' LIMIT 1",
}


def _read(path: Path) -> tuple[str | None, bool]:
    """The schema revision alembic recorded (None if none) and whether the store holds data.

    Opened read-write on purpose: SQLite rolls back a journal a killed writer left before answering.
    """
    try:
        with contextlib.closing(sqlite3.connect(path, timeout=30)) as con:
            tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            rows = (
                con.execute("SELECT version_num FROM alembic_version").fetchall() if "alembic_version" in tables else []
            )
            holds = any(con.execute(query).fetchone() for table, query in DATA.items() if table in tables)
    except sqlite3.DatabaseError as exc:
        if "not a database" in str(exc) or "malformed" in str(exc):
            return None, False  # nothing SQLite can read: nothing to keep
        raise TrackingStoreError(
            f"cannot read the MLflow store {path} ({exc}): is another process holding it?"
        ) from None
    return (rows[0][0] if len(rows) == 1 else None), holds


def _move_aside(path: Path) -> None:
    """Keep a half-made store beside the home for inspection, out of the way of the one rebuilt."""
    aside = path.with_name(f"{path.name}.half-made-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}")
    with contextlib.suppress(FileNotFoundError):  # another process moved it first
        path.rename(aside)
    for suffix in ("-journal", "-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            path.with_name(path.name + suffix).rename(aside.with_name(aside.name + suffix))


def _build(path: Path) -> None:
    """Create the schema in a hidden sibling, then link it to `path` (a store another process made first wins)."""
    from mlflow.store.db.utils import _initialize_tables, create_sqlalchemy_engine

    path.parent.mkdir(parents=True, exist_ok=True)
    staging = staging_dir(path, MAKING)
    chatty = logging.getLogger("mlflow.store.db.utils")  # two INFO lines on stderr per new store, even on failure
    level = chatty.level
    try:
        chatty.setLevel(logging.WARNING)
        engine = create_sqlalchemy_engine(f"sqlite:///{staging}")
        try:
            _initialize_tables(engine)
        finally:
            engine.dispose()
            chatty.setLevel(level)
        with open(staging, "rb+") as handle:
            os.fsync(handle.fileno())
        with contextlib.suppress(FileExistsError):
            os.link(staging, path)
        _fsync_dir(path.parent)
    except Exception as exc:
        _discard(staging)  # first: the free space reported is what the user has to work with
        raise TrackingStoreError(_why(exc, path)) from None
    finally:
        _discard(staging)


def _discard(staging: Path) -> None:
    for leftover in (staging, staging.with_name(staging.name + "-journal")):
        leftover.unlink(missing_ok=True)


def _why(exc: BaseException, path: Path) -> str:
    """One line for a failed build: full disk and permissions named, anything else by its first line."""
    text = " ".join(str(exc).split())
    if names_full_disk(exc):
        try:
            left = f"{human_bytes(free_bytes(path.parent))} free"
        except OSError:
            left = "free space unknown"
        return f"no space left on {path.parent} for the MLflow store ({left}, it needs ~1 MiB): free space, run again"
    return f"could not make the MLflow store {path} ({text[:200]}): check that {path.parent} is writable and run again"


def _remove_dead_stagings(path: Path) -> None:
    """Delete hidden half-built stores whose builder process is gone (killed while building)."""
    for staging in path.parent.glob(f".{path.name}.{MAKING}-*"):
        pid = staging.name.split(f".{MAKING}-")[1].split("-")[0]
        if pid.isdigit() and not pid_alive(int(pid)):
            staging.unlink(missing_ok=True)

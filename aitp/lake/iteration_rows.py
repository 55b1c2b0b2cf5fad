"""The `iterations` table: one row per (experiment, iteration), merged field by field as stages finish.

The row is how a resumed run knows where it stopped (`status`), and how a user joins an
iteration to its Prefect flow run, its MLflow run, its config and its models. Every writer merges
into the committed row (read, update, commit the partition again), so stages can record their
own fields without knowing the others'.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aitp.lake.errors import UnknownPartitionError
from aitp.lake.reader import read_partition
from aitp.lake.writer import write_partition

TABLE = "iterations"
DONE = "done"


def read_iteration(home: str | Path, experiment: str, iteration: int) -> dict[str, Any] | None:
    """The committed row of an iteration (None before it started)."""
    try:
        rows = read_partition(home, TABLE, experiment, iteration).to_pylist()
    except UnknownPartitionError:
        return None
    return rows[0] if rows else None


def record_iteration(home: str | Path, experiment: str, iteration: int, fields: dict[str, Any]) -> None:
    """Merge `fields` into the iteration's row; `model_in`, once set by whoever started it, is kept."""
    existing = read_iteration(home, experiment, iteration) or {}
    row = {k: v for k, v in existing.items() if k not in ("experiment", "iteration")}
    for key, value in fields.items():
        if key == "model_in" and row.get("model_in"):
            continue
        row[key] = value
    row["created_at"] = None
    write_partition(home, TABLE, experiment, iteration, [row], shard="0")


def is_finished(home: str | Path, experiment: str, iteration: int) -> bool:
    """Whether the iteration's row says it is done (a resumed run skips it)."""
    row = read_iteration(home, experiment, iteration)
    return bool(row) and row.get("status") == DONE

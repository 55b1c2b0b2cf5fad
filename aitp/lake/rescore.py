"""Re-score stored rollouts with the current verifier, into the `rescores` table beside the originals.

Stored rollouts are never rewritten: each rollouts shard gets a rescores shard of the same name in
the same partition (rescoring again replaces it), keyed by (item_id, group_id, sample_index), and
the `rollouts_rescored` view puts the new columns next to the old. The item comes from the
`items` table when it holds the row, else it is regenerated from its identity.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from aitp.errors import AitpError
from aitp.lake.catalog import as_lake, require_partition
from aitp.lake.errors import LakeError
from aitp.lake.storage import Lake
from aitp.lake.views import connect
from aitp.lake.writer import write_partition

# (item as a dict of aitp.reasoning Item fields, completion) -> (raw, lenient, format_error, extracted)
ScoreFn = Callable[[dict[str, Any], str], tuple[float, float, str | None, str | None]]

_COLUMNS = [
    "item_id", "task", "config_json", "seed", "item_index", "split", "difficulty_level", "gold_answer",
    "group_id", "sample_index", "completion", "raw_score", "lenient_score", "format_error",
]  # fmt: skip


@dataclass
class TaskChanges:
    """How many stored scores of one task the current verifier changed."""

    task: str
    n_rollouts: int = 0
    n_raw_changed: int = 0
    n_lenient_changed: int = 0
    n_format_changed: int = 0
    n_unscorable: int = 0


def verifier_version() -> str:
    """The versions that decide a score: aitp's and reasoning-gym's."""
    parts = []
    for package in ("aitp", "reasoning-gym"):
        try:
            parts.append(f"{package} {version(package)}")
        except PackageNotFoundError:
            parts.append(f"{package} unknown")
    return "; ".join(parts)


def envs_scorer() -> ScoreFn:
    """The current verifier of `aitp.reasoning`, caching each item across the samples of its group."""
    try:
        from aitp.reasoning.items import Item
        from aitp.reasoning.scoring import score_completion
    except ImportError as exc:
        raise LakeError(f"rescore needs the verifier in aitp.reasoning ({exc}): update aitp") from exc
    cache: dict[str, Any] = {}

    def score(item: dict[str, Any], completion: str) -> tuple[float, float, str | None, str | None]:
        key = item["item_id"]
        if key not in cache:
            cache[key] = Item.from_dict(item)
        scored = score_completion(cache[key], completion)
        return scored.raw, scored.lenient, scored.format_error, scored.extracted

    return score


def _differs(old: float | None, new: float | None) -> bool:
    if old is None or new is None or math.isnan(old) or math.isnan(new):
        return (old is None) != (new is None)
    return abs(old - new) > 1e-9


def _known_items(lake: Lake, experiment: str) -> dict[str, dict[str, Any]]:
    """question / answer / metadata of the experiment's items table, by item id."""
    rows = (
        connect(lake)
        .execute(
            "SELECT item_id, any_value(question), any_value(gold_answer), any_value(metadata_json)"
            " FROM items WHERE experiment = ? AND question IS NOT NULL GROUP BY item_id",
            [experiment],
        )
        .fetchall()
    )
    return {i: {"question": q, "answer": a, "metadata": json.loads(m or "{}")} for i, q, a, m in rows}


def _read_rows(lake: Lake, path: str) -> list[dict[str, Any]]:
    """The columns rescoring needs; a column an old partition lacks reads as None."""
    with lake.fs.open_input_file(path) as handle:
        parquet = pq.ParquetFile(handle)
        present = [c for c in _COLUMNS if c in parquet.schema_arrow.names]
        rows = parquet.read(columns=present).to_pylist()
    return [{c: row.get(c) for c in _COLUMNS} for row in rows]


def _item(row: dict[str, Any], known: dict[str, dict[str, Any]]) -> dict[str, Any]:
    item = {
        "item_id": row["item_id"],
        "task": row["task"],
        "config": json.loads(row["config_json"] or "{}"),
        "seed": row["seed"],
        "index": row["item_index"],
        "split": row["split"] or "train",
        "level": row["difficulty_level"],
        "answer": row["gold_answer"],
    }
    item.update(known.get(row["item_id"], {}))
    return {k: v for k, v in item.items() if v is not None}


def rescore(
    home: str | Path | Lake | None,
    experiment: str,
    iteration: int | None = None,
    score_fn: ScoreFn | None = None,
) -> list[TaskChanges]:
    """Re-score an experiment's rollouts (or one iteration's); returns the changes per task."""
    lake = as_lake(home)
    commits = require_partition(lake, "rollouts", experiment, iteration)
    score_fn = score_fn or envs_scorer()
    known = _known_items(lake, experiment)
    stamp = verifier_version()
    changes: dict[str, TaskChanges] = {}
    for commit in sorted(commits, key=lambda c: (c.iteration, c.shard)):
        out = []
        for path in commit.files:
            for row in _read_rows(lake, path):
                tally = changes.setdefault(row["task"], TaskChanges(row["task"]))
                tally.n_rollouts += 1
                try:
                    raw, lenient, format_error, extracted = score_fn(_item(row, known), row["completion"] or "")
                except (AitpError, KeyError, ValueError, TypeError):  # identity the verifier cannot rebuild
                    tally.n_unscorable += 1
                    raw = lenient = format_error = extracted = None
                flags = {
                    "raw_changed": raw is not None and _differs(row["raw_score"], raw),
                    "lenient_changed": lenient is not None and _differs(row["lenient_score"], lenient),
                    "format_changed": raw is not None and row["format_error"] != format_error,
                }
                tally.n_raw_changed += flags["raw_changed"]
                tally.n_lenient_changed += flags["lenient_changed"]
                tally.n_format_changed += flags["format_changed"]
                out.append(
                    {
                        **{k: row[k] for k in ("item_id", "group_id", "sample_index", "task")},
                        "verifier_version": stamp,
                        "rescored_raw_score": raw,
                        "rescored_lenient_score": lenient,
                        "rescored_format_error": format_error,
                        "rescored_extracted_answer": extracted,
                        **flags,
                    }
                )
        write_partition(lake, "rescores", commit.experiment, commit.iteration, out, shard=commit.shard)
    return sorted(changes.values(), key=lambda c: c.task)

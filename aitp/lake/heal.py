"""Healing after a repair: the iterations that lost committed shards are marked, so the loop redoes them.

`aitp lake check --repair` quarantines what is bad; the shards that held data are then missing.
Each iteration that lost one gets its `iterations` row set to status `repaired`, with the lost
shards in `repaired_shards` (`<table>/<shard>`). The loop does not skip such an iteration (only
`done` ones), and each stage commits only what is not committed, so the re-run regenerates
exactly what is gone: items, rollouts and evals are deterministic (an evaluation whose shard was lost is run
again, not reused). `missing_shards` tells a caller what still has to be written; an iteration is marked `done`
only once it is empty, and then it is healed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from aitp.lake.catalog import as_lake, commits, is_committed
from aitp.lake.errors import UnknownPartitionError
from aitp.lake.iteration_rows import DONE, read_iteration, record_iteration
from aitp.lake.reader import read_partition
from aitp.lake.storage import Lake

REPAIRED = "repaired"


@dataclass(frozen=True, order=True)
class Shard:
    """One committed unit of the lake: (table, experiment, iteration, shard)."""

    table: str
    experiment: str
    iteration: int
    shard: str

    @property
    def label(self) -> str:
        """How `repaired_shards` names it: `<table>/<shard>`."""
        return f"{self.table}/{self.shard}"


def _is_loop_experiment(lake: Lake, experiment: str) -> bool:
    """Whether the loop runs this experiment: some iteration row of it is still committed. An experiment
    whose rows are all gone was deleted whole (or never looped): marking would bring it back."""
    return bool(commits(lake, "iterations", experiment))


def mark_damaged(home: str | Path | Lake | None, lost: Iterable[Shard]) -> list[tuple[str, int]]:
    """Set each loop iteration that lost shards to `repaired`, listing them; returns the (experiment, iteration)s."""
    lake = as_lake(home)
    by_iteration: dict[tuple[str, int], list[Shard]] = {}
    for shard in lost:
        by_iteration.setdefault((shard.experiment, shard.iteration), []).append(shard)
    marked = []
    for (experiment, iteration), shards in sorted(by_iteration.items()):
        if not _is_loop_experiment(lake, experiment):
            continue
        row = read_iteration(lake, experiment, iteration) or {}
        earlier = (row.get("repaired_shards") or []) if row.get("status") == REPAIRED else []
        fields = {"status": REPAIRED, "repaired_shards": sorted({*earlier, *(s.label for s in shards)})}
        record_iteration(lake, experiment, iteration, fields)
        marked.append((experiment, iteration))
    return marked


def damaged_iterations(home: str | Path | Lake | None, experiment: str) -> list[int]:
    """Iterations of an experiment that a repair left incomplete (status `repaired`): the loop must redo them."""
    lake = as_lake(home)
    if not commits(lake, "iterations", experiment):
        return []
    rows = read_partition(lake, "iterations", experiment).to_pylist()
    return sorted(r["iteration"] for r in rows if r.get("status") == REPAIRED)


def missing_shards(home: str | Path | Lake | None, experiment: str, iteration: int | None = None) -> list[Shard]:
    """Shards a repair removed from iterations not done since (`repaired`, or being redone) that are not committed
    again yet: what a resumed run must regenerate before the iteration may be done."""
    lake = as_lake(home)
    if not commits(lake, "iterations", experiment):
        return []
    try:
        rows = read_partition(lake, "iterations", experiment, iteration).to_pylist()
    except UnknownPartitionError:
        return []
    missing = []
    for row in rows:
        if row.get("status") == DONE:
            continue
        for label in row.get("repaired_shards") or []:
            table, _, name = label.partition("/")
            shard = Shard(table, experiment, row["iteration"], name)
            if not is_committed(lake, table, experiment, shard.iteration, name):
                missing.append(shard)
    return sorted(missing)

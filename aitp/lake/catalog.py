"""What is committed: partition paths, commit records (manifests), and listings built from them.

Readers trust manifests only: a Parquet file is visible exactly when a manifest lists it.
"""

from __future__ import annotations

import json
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from aitp.lake.errors import LakeError, UnknownPartitionError
from aitp.lake.integrity import Checksum
from aitp.lake.schemas import schema_of
from aitp.lake.storage import Lake, open_lake

MANIFEST_FORMAT = 1
COMMITS_DIR = "_commits"
# One copy of every manifest outside its partition, so a partition directory that disappears is noticed.
INDEX_DIR = "_index"
_EXPERIMENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
_SHARD = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")

Home = str | Path | Lake | None


def as_lake(home: Home) -> Lake:
    """A Lake from a home (path, URI, None for the default) or a Lake already opened."""
    return home if isinstance(home, Lake) else open_lake(home)


def check_experiment(experiment: str) -> str:
    if not isinstance(experiment, str) or not _EXPERIMENT.match(experiment):
        raise LakeError(f"bad experiment name {experiment!r}: use letters, digits, '_', '-', '.' (up to 128)")
    return experiment


def check_iteration(iteration: int) -> int:
    if isinstance(iteration, bool) or not isinstance(iteration, int) or iteration < 0:
        raise LakeError(f"bad iteration {iteration!r}: use an integer >= 0")
    return iteration


def check_shard(shard: str) -> str:
    if not isinstance(shard, str) or not _SHARD.match(shard):
        raise LakeError(f"bad shard name {shard!r}: use letters, digits, '_', '-' (up to 64)")
    return shard


def table_dir(lake: Lake, table: str) -> str:
    schema_of(table)  # unknown table: one-line error
    return lake.path(table)


def partition_dir(lake: Lake, table: str, experiment: str, iteration: int) -> str:
    return f"{table_dir(lake, table)}/experiment={experiment}/iteration={iteration}"


def manifest_path(partition: str, shard: str) -> str:
    return f"{partition}/{COMMITS_DIR}/{shard}.json"


def index_path(lake: Lake, table: str, experiment: str, iteration: int, shard: str) -> str:
    """Where the index keeps its copy of a shard's manifest (outside the partition directory)."""
    return lake.path(INDEX_DIR, table, f"experiment={experiment}", f"iteration={iteration}", f"{shard}.json")


@dataclass(frozen=True)
class Commit:
    """One committed shard of a partition: its files (full paths) and row count."""

    table: str
    experiment: str
    iteration: int
    shard: str
    commit_id: str
    files: tuple[str, ...]
    rows: int
    committed_at: str = ""
    # files of earlier commits of this shard -> when they stopped being current (epoch seconds);
    # kept a while so a reader that listed them before this commit can still open them
    superseded: dict[str, float] = field(default_factory=dict)
    # file (full path) -> its size and digest when written; empty in manifests older than checksums
    checksums: dict[str, Checksum] = field(default_factory=dict)

    def to_json(self) -> dict:
        """The manifest: file names relative to the partition directory."""
        return {
            "format": MANIFEST_FORMAT,
            "table": self.table,
            "experiment": self.experiment,
            "iteration": self.iteration,
            "shard": self.shard,
            "commit_id": self.commit_id,
            "files": [p.rsplit("/", 1)[1] for p in self.files],
            "rows": self.rows,
            "committed_at": self.committed_at,
            "superseded": {p.rsplit("/", 1)[1]: t for p, t in self.superseded.items()},
            "checksums": {p.rsplit("/", 1)[1]: c.to_json() for p, c in self.checksums.items()},
        }


def parse_manifest(text: str, partition: str) -> Commit:
    """A Commit from manifest text; ValueError/KeyError/TypeError when it is malformed."""
    data = json.loads(text)
    if data.get("format") != MANIFEST_FORMAT:
        raise ValueError(f"unknown manifest format {data.get('format')!r}")
    superseded = {str(n): float(t) for n, t in data.get("superseded", {}).items()}
    names = [str(n) for n in data["files"]] + list(superseded)
    if any("/" in n or n.startswith((".", "_")) for n in names):
        raise ValueError("manifest names a file outside its partition")
    return Commit(
        table=str(data["table"]),
        experiment=str(data["experiment"]),
        iteration=int(data["iteration"]),
        shard=str(data["shard"]),
        commit_id=str(data["commit_id"]),
        files=tuple(f"{partition}/{n}" for n in data["files"]),
        rows=int(data["rows"]),
        committed_at=str(data.get("committed_at", "")),
        superseded={f"{partition}/{n}": t for n, t in superseded.items()},
        checksums={f"{partition}/{n}": Checksum.from_json(c) for n, c in data.get("checksums", {}).items()},
    )


def read_commit(lake: Lake, partition: str, shard: str) -> Commit | None:
    """The committed shard, or None when there is none (or its manifest is unreadable)."""
    path = manifest_path(partition, shard)
    if not lake.exists(path):
        return None
    try:
        return parse_manifest(lake.read_text(path), partition)
    except (ValueError, KeyError, TypeError) as exc:
        warnings.warn(f"skipping unreadable manifest {lake.show(path)} ({exc}): run `aitp lake check`", stacklevel=3)
        return None


def _values(lake: Lake, path: str, key: str) -> list[str]:
    prefix = f"{key}="
    return [i.base_name[len(prefix) :] for i in lake.listdir(path) if i.base_name.startswith(prefix)]


def partitions(lake: Lake, table: str, experiment: str | None = None) -> list[tuple[str, int, str]]:
    """(experiment, iteration, directory) of every partition directory of a table, in order."""
    out = []
    base = table_dir(lake, table)
    for exp in [experiment] if experiment is not None else _values(lake, base, "experiment"):
        for it in _values(lake, f"{base}/experiment={exp}", "iteration"):
            if it.isdigit():
                out.append((exp, int(it), f"{base}/experiment={exp}/iteration={it}"))
    return sorted(out, key=lambda p: (p[0], p[1]))


def commits(home: Home, table: str, experiment: str | None = None, iteration: int | None = None) -> list[Commit]:
    """Every committed shard of a table (optionally of one experiment / iteration)."""
    lake = as_lake(home)
    found = []
    for _exp, it, pdir in partitions(lake, table, experiment):
        if iteration is not None and it != iteration:
            continue
        for info in lake.listdir(f"{pdir}/{COMMITS_DIR}"):
            name = info.base_name
            if name.endswith(".json") and not name.startswith("."):
                commit = read_commit(lake, pdir, name[: -len(".json")])
                if commit is not None:
                    found.append(commit)
    return found


def experiments(home: Home = None, table: str = "rollouts") -> list[str]:
    """Experiments with at least one committed shard in a table."""
    return sorted({c.experiment for c in commits(home, table)})


def iterations(home: Home, experiment: str, table: str = "rollouts") -> list[int]:
    """Iterations of an experiment with at least one committed shard in a table."""
    return sorted({c.iteration for c in commits(home, table, experiment)})


def committed_shards(home: Home, table: str, experiment: str, iteration: int) -> list[str]:
    """Shards committed in one partition (what a resumed stage can skip)."""
    return sorted(c.shard for c in commits(home, table, experiment, iteration))


def is_committed(home: Home, table: str, experiment: str, iteration: int, shard: str = "0") -> bool:
    """Whether (table, experiment, iteration, shard) has a commit."""
    lake = as_lake(home)
    return read_commit(lake, partition_dir(lake, table, experiment, iteration), check_shard(shard)) is not None


def require_partition(home: Home, table: str, experiment: str, iteration: int | None = None) -> list[Commit]:
    """The commits of an experiment (and iteration), or a one-line error naming what exists."""
    lake = as_lake(home)
    mine = commits(lake, table, experiment) if _EXPERIMENT.match(str(experiment)) else []
    where = lake.show(table_dir(lake, table))
    if not mine:
        known = ", ".join(sorted({c.experiment for c in commits(lake, table)})) or "none"
        raise UnknownPartitionError(f"unknown experiment '{experiment}' in {where}; known: {known}")
    if iteration is None:
        return mine
    picked = [c for c in mine if c.iteration == iteration]
    if not picked:
        known = ", ".join(str(i) for i in sorted({c.iteration for c in mine}))
        raise UnknownPartitionError(
            f"unknown iteration {iteration} of experiment '{experiment}' in {where}; known: {known}"
        )
    return picked


@dataclass(frozen=True)
class IndexEntry:
    """A shard the index says was committed, and where that record lives."""

    table: str
    experiment: str
    iteration: int
    shard: str
    path: str


def index_entries(home: Home) -> list[IndexEntry]:
    """Every shard the lake's index records as committed, in order."""
    lake = as_lake(home)
    base = lake.path(INDEX_DIR)
    found = []
    for info in lake.walk_files(base):
        parts = info.path[len(base) + 1 :].split("/")
        if len(parts) != 4 or not parts[3].endswith(".json") or parts[3].startswith("."):
            continue
        table, exp, it, name = parts
        if exp.startswith("experiment=") and it.startswith("iteration=") and it[len("iteration=") :].isdigit():
            found.append(
                IndexEntry(table, exp[len("experiment=") :], int(it[len("iteration=") :]), name[:-5], info.path)
            )
    return sorted(found, key=lambda e: (e.table, e.experiment, e.iteration, e.shard))

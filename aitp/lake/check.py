"""`aitp lake check`: find what a reader could trip on, and with `repair` move it to a quarantine.

Problems: committed files that are missing, unreadable or hold the wrong row count; manifests
that do not parse; Parquet files no manifest lists (orphans of killed writers); staging leftovers.
Repair moves files to `<home>/lake/_quarantine/<stamp>/…` (same relative path) and records why in
`QUARANTINE.json` there; nothing is deleted. A bad committed file takes its manifest with it, so
the shard reads as not committed (and a resumed stage writes it again).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

import pyarrow.parquet as pq

from aitp.lake.catalog import COMMITS_DIR, as_lake, parse_manifest, partitions
from aitp.lake.schemas import TABLES
from aitp.lake.storage import Lake
from aitp.lake.writer import STAGING_DIR

QUARANTINE_DIR = "_quarantine"
DEFAULT_GRACE_S = 600.0  # younger unlisted files may belong to a writer still committing


@dataclass
class Problem:
    """One thing wrong in the lake."""

    kind: str  # corrupt | missing | bad-manifest | orphan | staging
    path: str
    detail: str
    repaired: bool = False


def _age_s(lake: Lake, path: str) -> float:
    mtime = lake.fs.get_file_info(path).mtime
    if mtime is None:
        return float("inf")
    return time.time() - mtime.timestamp()


def _verify(lake: Lake, path: str, rows: int | None, deep: bool) -> str | None:
    """Why a committed Parquet file cannot be read, or None when it reads."""
    try:
        with lake.fs.open_input_file(path) as handle:
            parquet = pq.ParquetFile(handle)
            found = parquet.metadata.num_rows
            if deep:
                for group in range(parquet.num_row_groups):
                    parquet.read_row_group(group)
    except Exception as exc:  # any failure to read is the finding itself
        return " ".join(str(exc).split()) or type(exc).__name__
    if rows is not None and found != rows:
        return f"holds {found} rows, its manifest says {rows}"
    return None


def _check_partition(lake: Lake, pdir: str, deep: bool, grace_s: float) -> list[tuple[Problem, list[str]]]:
    """Problems of one partition, each with the paths that repair moves."""
    found: list[tuple[Problem, list[str]]] = []
    listed: set[str] = set()
    for info in lake.listdir(f"{pdir}/{COMMITS_DIR}"):
        path, name = info.path, info.base_name
        if name.startswith("."):
            if _age_s(lake, path) >= grace_s:
                found.append((Problem("staging", lake.show(path), "unfinished manifest write"), [path]))
            continue
        try:
            commit = parse_manifest(lake.read_text(path), pdir)
        except (ValueError, KeyError, TypeError) as exc:
            found.append((Problem("bad-manifest", lake.show(path), f"does not parse: {exc}"), [path]))
            continue
        listed.update(commit.files, commit.superseded)
        for file in commit.files:
            if not lake.exists(file):
                found.append((Problem("missing", lake.show(file), f"listed by {name} but absent"), [path]))
                continue
            why = _verify(lake, file, commit.rows if len(commit.files) == 1 else None, deep)
            if why:
                found.append((Problem("corrupt", lake.show(file), why), [file, path]))
    for info in lake.listdir(pdir):
        if info.base_name.endswith(".parquet") and info.path not in listed:
            if _age_s(lake, info.path) >= grace_s:
                found.append((Problem("orphan", lake.show(info.path), "in no commit (invisible)"), [info.path]))
    return found


def _quarantine(lake: Lake, stamp: str, paths: list[str]) -> None:
    for path in paths:
        if not lake.exists(path):
            continue
        relative = path[len(lake.root) :].lstrip("/")
        target = lake.path(QUARANTINE_DIR, stamp, relative)
        lake.makedirs(target.rsplit("/", 1)[0])
        lake.fs.move(path, target)


def check_lake(
    home: str | Path | Lake | None = None,
    *,
    repair: bool = False,
    deep: bool = False,
    grace_s: float = DEFAULT_GRACE_S,
) -> list[Problem]:
    """Every problem in the lake; with `repair`, each is moved to the quarantine and marked repaired."""
    lake = as_lake(home)
    found: list[tuple[Problem, list[str]]] = []
    for table in TABLES:
        for _exp, _it, pdir in partitions(lake, table):
            found += _check_partition(lake, pdir, deep, grace_s)
    staging = lake.path(STAGING_DIR)
    for info in lake.walk_files(staging):
        if _age_s(lake, info.path) >= grace_s:
            found.append((Problem("staging", lake.show(info.path), "left by a writer that stopped"), [info.path]))
    if repair and found:
        stamp = f"{datetime.now(UTC):%Y%m%dT%H%M%S}-{time.time_ns() % 10**6:06d}"
        for problem, paths in found:
            _quarantine(lake, stamp, paths)
            problem.repaired = True
        lake.makedirs(lake.path(QUARANTINE_DIR, stamp))
        lake.write_json_atomic(lake.path(QUARANTINE_DIR, stamp, "QUARANTINE.json"), [asdict(p) for p, _ in found])
        for info in reversed(lake.listdir(staging)):
            lake.remove_empty_dir(info.path)
    return [problem for problem, _ in found]

"""`aitp lake check`: find what a reader could trip on, and with `repair` move it to a quarantine.

Problems: committed files whose bytes are not those their manifest recorded (size and checksum;
footer and row count for manifests older than checksums), missing files, manifests that do not
parse, committed shards whose manifest or whole partition directory is gone (the lake's index
remembers every commit outside its partition), Parquet files no manifest lists (orphans of killed
writers) and staging leftovers. Repair moves files to `<home>/lake/_quarantine/<stamp>/…` (same
relative path) and records why in `QUARANTINE.json` there; nothing is deleted. A bad committed
file takes its manifest (and index entry) with it, so the shard reads as not committed, and the
iterations it belonged to are marked for the loop to regenerate (`aitp.lake.heal`). Until a resumed run has
committed every such shard again, a check names each gap by table and iteration and fails.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from aitp.lake.catalog import COMMITS_DIR, as_lake, index_entries, index_path, manifest_path, parse_manifest, partitions
from aitp.lake.heal import Shard, mark_damaged, missing_shards
from aitp.lake.integrity import file_problem
from aitp.lake.schemas import TABLES
from aitp.lake.storage import Lake
from aitp.lake.writer import STAGING_DIR

QUARANTINE_DIR = "_quarantine"
DEFAULT_GRACE_S = 600.0  # younger unlisted files may belong to a writer still committing


@dataclass
class Problem:
    """One thing wrong in the lake, and the committed shard it costs (None when no data is lost)."""

    kind: str  # corrupt | missing | missing-commit | missing-partition | bad-manifest | orphan | staging
    path: str
    detail: str
    repaired: bool = False
    shard: Shard | None = None


@dataclass
class CheckReport:
    """What a check found, and how many committed files it could verify by checksum."""

    problems: list[Problem] = field(default_factory=list)
    verified: int = 0
    unverified: int = 0  # files of manifests written before checksums: read back, not verified
    marked: list[tuple[str, int]] = field(default_factory=list)  # (experiment, iteration) set to `repaired`
    gaps: list[Shard] = field(default_factory=list)
    """Shards a repair quarantined that no run has committed again yet: the lake is not whole until a resumed
    run regenerates them (`aitp run --resume`), so a check reports them and fails."""


Found = list[tuple[Problem, list[str]]]


def _age_s(lake: Lake, path: str) -> float:
    mtime = lake.fs.get_file_info(path).mtime
    if mtime is None:
        return float("inf")
    return time.time() - mtime.timestamp()


def _check_partition(
    lake: Lake, table: str, exp: str, it: int, pdir: str, deep: bool, grace_s: float, report: CheckReport
) -> Found:
    """Problems of one partition, each with the paths that repair moves."""
    found: Found = []
    listed: set[str] = set()
    for info in lake.listdir(f"{pdir}/{COMMITS_DIR}"):
        path, name = info.path, info.base_name
        if name.startswith("."):
            if _age_s(lake, path) >= grace_s:
                found.append((Problem("staging", lake.show(path), "unfinished manifest write"), [path]))
            continue
        shard = Shard(table, exp, it, name.removesuffix(".json"))
        index = index_path(lake, table, exp, it, shard.shard)
        try:
            commit = parse_manifest(lake.read_text(path), pdir)
        except (ValueError, KeyError, TypeError) as exc:
            found.append(
                (Problem("bad-manifest", lake.show(path), f"does not parse: {exc}", shard=shard), [path, index])
            )
            continue
        listed.update(commit.files, commit.superseded)
        for file in commit.files:
            if not lake.exists(file):
                problem = Problem("missing", lake.show(file), f"listed by {name} but absent", shard=shard)
                found.append((problem, [path, index]))
                continue
            checksum = commit.checksums.get(file)
            rows = commit.rows if len(commit.files) == 1 else None
            why = file_problem(lake, file, checksum, rows, deep)
            if why:
                found.append((Problem("corrupt", lake.show(file), why, shard=shard), [file, path, index]))
            elif checksum is None:
                report.unverified += 1
            else:
                report.verified += 1
    for info in lake.listdir(pdir):
        if info.base_name.endswith(".parquet") and info.path not in listed:
            if _age_s(lake, info.path) >= grace_s:
                found.append((Problem("orphan", lake.show(info.path), "in no commit (invisible)"), [info.path]))
    return found


def _check_index(lake: Lake) -> Found:
    """Shards the index says were committed whose manifest, or whole partition directory, is gone."""
    found: Found = []
    gone: dict[str, list[tuple[Shard, str]]] = {}
    for entry in index_entries(lake):
        if entry.table not in TABLES:
            continue
        pdir = lake.path(entry.table, f"experiment={entry.experiment}", f"iteration={entry.iteration}")
        manifest = manifest_path(pdir, entry.shard)
        if lake.exists(manifest):
            continue
        shard = Shard(entry.table, entry.experiment, entry.iteration, entry.shard)
        if lake.exists(pdir):
            detail = f"shard '{entry.shard}' was committed but its manifest is gone (rows no longer read)"
            found.append((Problem("missing-commit", lake.show(manifest), detail, shard=shard), [entry.path]))
        else:
            gone.setdefault(pdir, []).append((shard, entry.path))
    for pdir, lost in gone.items():
        names = ", ".join(s.shard for s, _ in lost)
        detail = f"partition directory is gone: committed shard(s) {names} no longer read"
        for shard, index in lost:  # one finding per shard, so each lost shard is healed
            found.append((Problem("missing-partition", lake.show(pdir), detail, shard=shard), [index]))
    return found


def _quarantine(lake: Lake, stamp: str, paths: list[str]) -> None:
    for path in paths:
        if not lake.exists(path):
            continue
        relative = path[len(lake.root) :].lstrip("/")
        target = lake.path(QUARANTINE_DIR, stamp, relative)
        lake.makedirs(target.rsplit("/", 1)[0])
        lake.fs.move(path, target)


def _record(problem: Problem) -> dict:
    data = asdict(problem)
    data["shard"] = asdict(problem.shard) if problem.shard else None
    return data


def check_report(
    home: str | Path | Lake | None = None,
    *,
    repair: bool = False,
    deep: bool = False,
    grace_s: float = DEFAULT_GRACE_S,
) -> CheckReport:
    """Check the whole lake; with `repair`, quarantine every problem and mark the iterations that lost data."""
    lake = as_lake(home)
    report = CheckReport()
    found: Found = []
    for table in TABLES:
        for exp, it, pdir in partitions(lake, table):
            found += _check_partition(lake, table, exp, it, pdir, deep, grace_s, report)
    found += _check_index(lake)
    staging = lake.path(STAGING_DIR)
    for info in lake.walk_files(staging):
        if _age_s(lake, info.path) >= grace_s:
            found.append((Problem("staging", lake.show(info.path), "left by a writer that stopped"), [info.path]))
    report.problems = [problem for problem, _ in found]
    if repair and found:
        stamp = f"{datetime.now(UTC):%Y%m%dT%H%M%S}-{time.time_ns() % 10**6:06d}"
        for problem, paths in found:
            _quarantine(lake, stamp, paths)
            problem.repaired = True
        lake.makedirs(lake.path(QUARANTINE_DIR, stamp))
        lake.write_json_atomic(
            lake.path(QUARANTINE_DIR, stamp, "QUARANTINE.json"), [_record(p) for p in report.problems]
        )
        for info in reversed(lake.listdir(staging)):
            lake.remove_empty_dir(info.path)
        report.marked = mark_damaged(lake, [p.shard for p in report.problems if p.shard is not None])
    experiments = sorted({exp for exp, _, _ in partitions(lake, "iterations")})
    report.gaps = [gap for exp in experiments for gap in missing_shards(lake, exp)]
    return report


def check_lake(
    home: str | Path | Lake | None = None,
    *,
    repair: bool = False,
    deep: bool = False,
    grace_s: float = DEFAULT_GRACE_S,
) -> list[Problem]:
    """Every problem in the lake; with `repair`, each is moved to the quarantine and marked repaired."""
    return check_report(home, repair=repair, deep=deep, grace_s=grace_s).problems

"""The trace lake: Parquet tables committed atomically, read through DuckDB views.

Layout, under `<home>/lake` (`<home>`: `--home`, else `$AITP_HOME`, else `./data`; a URI such as
`s3://bucket/prefix` works through pyarrow / fsspec):

    <table>/experiment=<e>/iteration=<k>/<shard>.<commit_id>.parquet   data (zstd)
    <table>/experiment=<e>/iteration=<k>/_commits/<shard>.json         commit record (manifest)
    _index/<table>/experiment=<e>/iteration=<k>/<shard>.json           copy of the manifest, outside the partition
    _staging/<commit_id>/                                              files being written
    _quarantine/<stamp>/…                                              what `aitp lake check --repair` moved

Commit protocol of one (table, experiment, iteration, shard):
  1. write the Parquet file under `_staging/<commit_id>/` (a fresh name, never seen by readers);
  2. rename it into the partition directory under its unique name (still invisible: no manifest
     lists it);
  3. write the manifest to a hidden temporary name and rename it over `_commits/<shard>.json`:
     this single atomic rename is the commit; the manifest names the new file with its size and
     blake2b checksum (digested while it was written), and lists the files of earlier commits as
     `superseded`, with the time they stopped being current;
  4. copy the manifest into `_index/`, so a partition directory that vanishes is still known;
  5. delete superseded files older than `RETAIN_SUPERSEDED_S` (10 minutes): a reader that listed
     them before this commit can still open them meanwhile (`aitp lake vacuum` does the same for
     shards that are not written again).
Readers build their file list from manifests only, so a writer killed at any step leaves either
the old commit or the new one visible, never a mix, and never two copies of a shard. What a killed
writer leaves behind (staging files, unlisted Parquet files) is reported by `aitp lake check` and
moved to the quarantine by `--repair`, as are committed files whose bytes no longer match their
checksum; the iterations that lose shards are marked `repaired` for the loop to redo
(`aitp.lake.heal`). One writer per shard; distinct shards and partitions may be
written concurrently. Columns are only ever added: old partitions read new columns as NULL.
On object stores a rename is a copy, but the commit is still the one manifest write, which an
object store makes visible whole or not at all. DuckDB reads them through fsspec (s3fs, gcsfs).
"""

from aitp.lake.catalog import (
    Commit,
    commits,
    committed_shards,
    experiments,
    is_committed,
    iterations,
    require_partition,
)
from aitp.lake.check import CheckReport, Problem, check_lake, check_report
from aitp.lake.export import atropos_records, export_atropos, validate_atropos_record
from aitp.lake.heal import Shard, damaged_iterations, mark_damaged, missing_shards
from aitp.lake.iteration_rows import is_finished, read_iteration, record_iteration
from aitp.lake.reader import read_partition
from aitp.lake.rescore import TaskChanges, rescore
from aitp.lake.schemas import SCHEMAS, TABLES, conform, rows_to_table, schema_of
from aitp.lake.storage import Lake, open_lake
from aitp.lake.vacuum import vacuum_lake
from aitp.lake.views import CURATED_VIEWS, connect
from aitp.lake.writer import write_partition

__all__ = [
    "is_finished",
    "read_iteration",
    "record_iteration",
    "CURATED_VIEWS",
    "CheckReport",
    "Commit",
    "Lake",
    "Problem",
    "SCHEMAS",
    "Shard",
    "TABLES",
    "TaskChanges",
    "atropos_records",
    "check_lake",
    "check_report",
    "commits",
    "committed_shards",
    "conform",
    "connect",
    "damaged_iterations",
    "experiments",
    "export_atropos",
    "is_committed",
    "iterations",
    "mark_damaged",
    "missing_shards",
    "open_lake",
    "read_partition",
    "require_partition",
    "rescore",
    "rows_to_table",
    "schema_of",
    "vacuum_lake",
    "validate_atropos_record",
    "write_partition",
]

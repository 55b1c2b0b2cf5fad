"""Writing one shard of a partition as an atomic commit (the protocol is in `aitp.lake`'s docstring)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from aitp.lake.catalog import (
    Commit,
    as_lake,
    check_experiment,
    check_iteration,
    check_shard,
    index_path,
    manifest_path,
    partition_dir,
    read_commit,
)
from aitp.lake.errors import SchemaError
from aitp.lake.integrity import Checksum, HashingSink
from aitp.lake.schemas import PARTITION_COLUMNS, conform, file_schema, rows_to_table, schema_of
from aitp.lake.storage import Lake

STAGING_DIR = "_staging"
TARGET_ROW_GROUP_BYTES = 64 * 1024 * 1024
MIN_ROW_GROUP, MAX_ROW_GROUP = 1024, 128 * 1024
# A replaced file stays this long, so a reader that listed it before the commit can still open it.
RETAIN_SUPERSEDED_S = 600.0

# A test seam: called with "writing" (after each row group), "staged", "placed" and "committed",
# so a test can SIGKILL a real writer at each step of the protocol.
_on_step: Callable[[str], None] | None = None


def _step(name: str) -> None:
    if _on_step is not None:
        _on_step(name)


def row_group_rows(data: pa.Table) -> int:
    """Rows per row group: about 64 MiB uncompressed, within [1024, 131072] rows."""
    per_row = max(1, data.nbytes // max(1, data.num_rows))
    return max(MIN_ROW_GROUP, min(MAX_ROW_GROUP, TARGET_ROW_GROUP_BYTES // per_row))


def _strip_partition(table: str, data: pa.Table, experiment: str, iteration: int) -> pa.Table:
    """Drop the partition columns (they live in the path), checking any values the rows carry."""
    for name, want in zip(PARTITION_COLUMNS, (experiment, iteration)):
        values = {v for v in data[name].to_pylist() if v is not None}
        if values - {want}:
            raise SchemaError(
                f"rows of table '{table}' carry {name}={sorted(values)[0]!r} but are written to "
                f"{name}={want!r}: drop the column or write to the matching partition"
            )
    return data.select([f.name for f in file_schema(table)])


def _write_parquet(lake: Lake, path: str, data: pa.Table, table: str) -> Checksum:
    """Write the file and return its checksum, digested on the way out (no second read)."""
    schema = data.schema.with_metadata({"aitp.table": table})
    rows = row_group_rows(data)
    with lake.fs.open_output_stream(path) as out:
        sink = HashingSink(out)
        with pq.ParquetWriter(sink, schema, compression="zstd", write_statistics=True) as writer:
            if data.num_rows == 0:
                writer.write_table(data.cast(schema))
            for start in range(0, data.num_rows, rows):
                writer.write_table(data.slice(start, rows).cast(schema), row_group_size=rows)
                _step("writing")
    lake.sync(path)
    return sink.checksum()


def write_partition(
    home: str | Path | Lake | None,
    table: str,
    experiment: str,
    iteration: int,
    rows: pa.Table | Iterable[Mapping[str, Any]],
    shard: str = "0",
) -> Commit:
    """Commit rows as shard `shard` of (table, experiment, iteration), replacing any earlier commit of it."""
    lake = as_lake(home)
    schema_of(table)
    check_experiment(experiment)
    check_iteration(iteration)
    check_shard(shard)
    data = conform(table, rows) if isinstance(rows, pa.Table) else rows_to_table(table, rows)
    data = _strip_partition(table, data, experiment, iteration)

    commit_id = f"{datetime.now(UTC):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:12]}"
    name = f"{shard}.{commit_id}.parquet"
    staging = lake.path(STAGING_DIR, commit_id)
    lake.makedirs(staging)
    checksum = _write_parquet(lake, f"{staging}/{name}", data, table)
    _step("staged")

    pdir = partition_dir(lake, table, experiment, iteration)
    lake.makedirs(f"{pdir}/_commits")
    lake.fs.move(f"{staging}/{name}", f"{pdir}/{name}")
    lake.remove_empty_dir(staging)
    _step("placed")

    old = read_commit(lake, pdir, shard)
    now = time.time()
    superseded = {**(old.superseded if old else {}), **dict.fromkeys(old.files if old else (), now)}
    expired = [p for p, since in superseded.items() if now - since >= RETAIN_SUPERSEDED_S]
    commit = Commit(
        table=table,
        experiment=experiment,
        iteration=iteration,
        shard=shard,
        commit_id=commit_id,
        files=(f"{pdir}/{name}",),
        rows=data.num_rows,
        committed_at=datetime.now(UTC).isoformat(),
        superseded={p: since for p, since in superseded.items() if p not in expired},
        checksums={f"{pdir}/{name}": checksum},
    )
    lake.write_json_atomic(manifest_path(pdir, shard), commit.to_json())
    _step("committed")
    # after the commit: a writer killed before this line leaves a shard the index lacks, which only
    # costs the check its view of that shard should the partition directory later vanish
    index = index_path(lake, table, experiment, iteration, shard)
    lake.makedirs(index.rsplit("/", 1)[0])
    lake.write_json_atomic(index, commit.to_json())

    for path in expired:
        if lake.exists(path):
            lake.fs.delete_file(path)
    return commit

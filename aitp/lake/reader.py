"""Reading committed rows straight into Arrow, without DuckDB (what a training stage wants)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from aitp.lake.catalog import as_lake, require_partition
from aitp.lake.schemas import conform, file_schema, schema_of
from aitp.lake.storage import Lake


def read_partition(
    home: str | Path | Lake | None, table: str, experiment: str, iteration: int | None = None
) -> pa.Table:
    """The committed rows of an experiment (or one iteration) in the table's current schema.

    Columns an old partition lacks come back null; an unknown experiment or iteration is an error.
    """
    lake = as_lake(home)
    schema_of(table)
    pieces = []
    for commit in sorted(require_partition(lake, table, experiment, iteration), key=lambda c: (c.iteration, c.shard)):
        for path in commit.files:
            with lake.fs.open_input_file(path) as handle:
                data = pq.ParquetFile(handle).read()
            keep = [n for n in data.column_names if n in file_schema(table).names]
            data = data.select(keep)
            data = data.append_column("experiment", pa.array([commit.experiment] * data.num_rows, pa.string()))
            data = data.append_column("iteration", pa.array([commit.iteration] * data.num_rows, pa.int64()))
            pieces.append(conform(table, data))
    return pa.concat_tables(pieces) if pieces else schema_of(table).empty_table()

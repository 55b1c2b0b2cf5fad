"""A column added after data was written: old partitions read it as NULL, nothing breaks."""

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from aitp.lake import connect, read_partition, schemas, write_partition
from aitp.lake.schemas import col
from tests.lake.helpers import rollout_rows


@pytest.fixture
def old_rollouts_schema(monkeypatch):
    """Make `rollouts` look like an earlier release: no `worker` and no `finish_reason` yet."""
    current = schemas.SCHEMAS["rollouts"]
    old = pa.schema([f for f in current if f.name not in ("worker", "finish_reason")])
    monkeypatch.setitem(schemas.SCHEMAS, "rollouts", old)
    return current


def test_old_partitions_read_new_columns_as_null(tmp_path, monkeypatch, old_rollouts_schema):
    home = tmp_path / "h"
    old_rows = [{k: v for k, v in r.items() if k not in ("worker", "finish_reason")} for r in rollout_rows(2, 2)]
    write_partition(home, "rollouts", "e", 0, old_rows)
    monkeypatch.setitem(schemas.SCHEMAS, "rollouts", old_rollouts_schema)  # the upgrade
    write_partition(home, "rollouts", "e", 1, rollout_rows(1, 2, worker="w9"))

    con = connect(home)
    rows = con.execute("SELECT iteration, worker, count(*) FROM rollouts GROUP BY ALL ORDER BY ALL").fetchall()
    assert rows == [(0, None, 4), (1, "w9", 2)]
    assert con.execute("SELECT sum(n) FROM pass_rate").fetchone()[0] == 6  # curated views still bind

    table = read_partition(home, "rollouts", "e")
    assert table.schema.names == old_rollouts_schema.names
    assert table.filter(pc.equal(table["iteration"], 0))["worker"].null_count == 4


def test_a_column_no_file_has_yet_is_still_queryable(tmp_path, monkeypatch):
    home = tmp_path / "h"
    write_partition(home, "rollouts", "e", 0, rollout_rows(1, 2))
    grown = schemas.SCHEMAS["rollouts"].append(col("reward_model_score", pa.float64(), "added later"))
    monkeypatch.setitem(schemas.SCHEMAS, "rollouts", grown)
    con = connect(home)
    assert con.execute("SELECT count(*), count(reward_model_score) FROM rollouts").fetchone() == (2, 0)
    types = {r[0]: r[1] for r in con.execute("DESCRIBE rollouts").fetchall()}
    assert types["reward_model_score"] == "DOUBLE"

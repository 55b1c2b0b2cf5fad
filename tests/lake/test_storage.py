"""Where the lake lives: ./data by default, $AITP_HOME or --home, and URI homes through pyarrow/fsspec."""

import uuid

import pytest

from aitp.lake import check_lake, connect, experiments, open_lake, read_partition, write_partition
from aitp.lake.errors import UnknownPartitionError
from tests.lake.helpers import cli, rollout_rows


def test_default_home_is_data_then_aitp_home(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("AITP_HOME", raising=False)
    assert open_lake().root == str(tmp_path / "data" / "lake")
    monkeypatch.setenv("AITP_HOME", str(tmp_path / "elsewhere"))
    assert open_lake().root == str(tmp_path / "elsewhere" / "lake")
    write_partition(None, "rollouts", "e", 0, rollout_rows(1, 1))
    assert (tmp_path / "elsewhere/lake/rollouts/experiment=e/iteration=0/_commits/0.json").exists()
    assert cli("sql", "--format", "csv", "SELECT count(*) AS n FROM rollouts").stdout == "n\n1\n"


def test_file_uri_home(tmp_path):
    home = f"file://{tmp_path}/h"
    write_partition(home, "rollouts", "e", 0, rollout_rows(2, 2))
    write_partition(home, "rollouts", "e", 0, rollout_rows(2, 2))
    assert (tmp_path / "h/lake/rollouts/experiment=e/iteration=0").is_dir()
    assert connect(home, read_only=True).execute("SELECT count(*) FROM rollouts").fetchone() == (4,)
    assert cli("sql", "--home", home, "--format", "csv", "SELECT count(*) AS n FROM pass_rate").stdout == "n\n2\n"


def test_object_store_home_through_fsspec():
    """`memory://` stands in for s3://: no local paths, pyarrow writes and DuckDB reads via fsspec."""
    home = f"memory://lake-test-{uuid.uuid4().hex[:8]}"
    lake = open_lake(home)
    assert lake.scheme == "memory" and not lake.is_local
    write_partition(home, "rollouts", "e", 0, rollout_rows(2, 2))
    write_partition(home, "rollouts", "e", 0, rollout_rows(3, 2))
    write_partition(home, "rollouts", "e", 1, rollout_rows(1, 2))
    con = connect(home, read_only=True)
    assert con.execute("SELECT iteration, count(*) FROM rollouts GROUP BY 1 ORDER BY 1").fetchall() == [(0, 6), (1, 2)]
    assert experiments(home) == ["e"]
    assert read_partition(home, "rollouts", "e", 0).num_rows == 6
    assert check_lake(home, grace_s=0) == []

    orphan = lake.path("rollouts/experiment=e/iteration=1/0.stray.parquet")
    with lake.fs.open_output_stream(orphan) as out:
        out.write(b"junk")
    (problem,) = check_lake(home, repair=True, grace_s=0)
    assert problem.path == f"memory://{orphan}" and problem.repaired
    assert lake.exists(lake.path("_quarantine")) and not lake.exists(orphan)
    with pytest.raises(UnknownPartitionError, match=r"in memory:///lake-test-.*/lake/rollouts"):
        read_partition(home, "rollouts", "nope")

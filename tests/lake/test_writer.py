"""Commits: idempotent per shard, schema enforced, listings built from commit records only."""

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from aitp.lake import (
    check_lake,
    commits,
    committed_shards,
    connect,
    experiments,
    is_committed,
    iterations,
    read_partition,
    rows_to_table,
    vacuum_lake,
    write_partition,
    writer,
)
from aitp.lake.errors import LakeError, SchemaError, UnknownPartitionError, UnknownTableError
from aitp.lake.writer import row_group_rows
from tests.lake.helpers import rollout_rows


def _count(home, table="rollouts", where="true"):
    return connect(home).execute(f"SELECT count(*) FROM {table} WHERE {where}").fetchone()[0]


def _parquet_files(home, iteration=0):
    return sorted((home / f"lake/rollouts/experiment=e/iteration={iteration}").glob("*.parquet"))


def test_rewriting_a_shard_replaces_it(tmp_path):
    home = tmp_path / "h"
    write_partition(home, "rollouts", "e", 0, rollout_rows(3, 2))
    write_partition(home, "rollouts", "e", 0, rollout_rows(3, 2))
    commit = write_partition(home, "rollouts", "e", 0, rollout_rows(3, 2, tag="v2"))
    assert _count(home) == 6
    assert _count(home, where="completion LIKE 'v1%'") == 0
    # Replaced files stay for readers that listed them before the commit, marked as superseded.
    assert len(_parquet_files(home)) == 3 and len(commit.superseded) == 2
    assert check_lake(home, grace_s=0) == []


def test_replaced_files_go_after_the_retention(tmp_path, monkeypatch):
    home = tmp_path / "h"
    for _ in range(3):
        last = write_partition(home, "rollouts", "e", 0, rollout_rows(3, 2))
    assert vacuum_lake(home) == []  # all replaced just now
    assert sorted(vacuum_lake(home, retain_s=0)) == sorted(last.superseded)
    assert _parquet_files(home) == [Path(last.files[0])] and _count(home) == 6

    monkeypatch.setattr(writer, "RETAIN_SUPERSEDED_S", 0.0)
    write_partition(home, "rollouts", "e", 1, rollout_rows(1, 2))
    write_partition(home, "rollouts", "e", 1, rollout_rows(1, 2))
    assert len(_parquet_files(home, 1)) == 1
    assert check_lake(home, grace_s=0) == []


def test_distinct_shards_and_partitions_add_up(tmp_path):
    home = tmp_path / "h"
    write_partition(home, "rollouts", "e", 0, rollout_rows(2, 2), shard="0")
    write_partition(home, "rollouts", "e", 0, rollout_rows(2, 2), shard="1")
    write_partition(home, "rollouts", "e", 1, rollout_rows(1, 2))
    write_partition(home, "rollouts", "other", 0, rollout_rows(1, 1))
    assert _count(home) == 4 + 4 + 2 + 1
    assert _count(home, where="experiment = 'e' AND iteration = 0") == 8
    assert experiments(home) == ["e", "other"]
    assert iterations(home, "e") == [0, 1]
    assert committed_shards(home, "rollouts", "e", 0) == ["0", "1"]
    assert is_committed(home, "rollouts", "e", 1)
    assert not is_committed(home, "rollouts", "e", 1, shard="1")
    assert not is_committed(home, "items", "e", 0)


def test_partition_keys_come_from_the_path(tmp_path):
    home = tmp_path / "h"
    commit = write_partition(home, "rollouts", "e1", 3, rollout_rows(1, 1, experiment="e1", iteration=3))
    stored = pq.read_schema(commit.files[0])
    assert "experiment" not in stored.names and "iteration" not in stored.names
    row = connect(home).execute("SELECT experiment, iteration FROM rollouts").fetchone()
    assert row == ("e1", 3)
    with pytest.raises(SchemaError, match="iteration"):
        write_partition(home, "rollouts", "e1", 4, rollout_rows(1, 1, iteration=3))


def test_numeric_experiment_names_stay_text(tmp_path):
    home = tmp_path / "h"
    write_partition(home, "rollouts", "007", 0, rollout_rows(1, 1))
    assert connect(home).execute("SELECT experiment FROM rollouts").fetchone()[0] == "007"


def test_json_columns_accept_objects(tmp_path):
    table = rows_to_table("rollouts", rollout_rows(1, 1))
    assert json.loads(table["prompt"][0].as_py())[1] == {"content": "q0", "role": "user"}
    assert table["created_at"].null_count == 0


def test_a_sampling_calls_timings_are_queried_with_sql(tmp_path):
    call = {"rows": 4, "slots": 4, "admissions": 1, "wait_s": 0.25, "seconds": 0.5}
    write_partition(tmp_path, "rollouts", "e", 0, rollout_rows(2, 2, sampler_json=call), shard="s0")
    got = connect(tmp_path).execute(
        "SELECT DISTINCT sampler_json->>'slots', CAST(sampler_json->>'wait_s' AS DOUBLE) FROM rollouts"
    )
    assert got.fetchall() == [("4", 0.25)]


def test_an_object_shared_by_many_rows_is_encoded_once_and_each_row_keeps_its_text(monkeypatch):
    import aitp.lake.schemas as schemas

    shared = [{"role": "user", "content": "same question"}]
    rows = rollout_rows(2, 4)
    for row in rows[:6]:
        row["prompt"] = shared  # a group's rows carry one prompt object, as the rollout worker builds them
    rows[6]["prompt"] = [dict(shared[0])]  # equal content, another object
    dumped = []
    real_dumps = schemas.json.dumps

    def counting(obj, **kwargs):
        dumped.append(obj)
        return real_dumps(obj, **kwargs)

    monkeypatch.setattr(schemas.json, "dumps", counting)
    table = rows_to_table("rollouts", rows)
    texts = table["prompt"].to_pylist()
    assert texts[:7] == [real_dumps(shared, sort_keys=True)] * 7
    assert sum(1 for obj in dumped if obj is shared) == 1
    assert json.loads(texts[7]) == rows[7]["prompt"]


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        (rollout_rows(1, 1, colour="red"), "unknown column.*colour"),
        (rollout_rows(1, 1, item_id=None), "item_id.*key"),
        (rollout_rows(1, 1, raw_score="high"), "raw_score"),
        (rollout_rows(1, 1, token_logprobs="no"), "token_logprobs"),
    ],
)
def test_rows_that_do_not_fit_are_refused_and_nothing_is_committed(tmp_path, rows, message):
    home = tmp_path / "h"
    with pytest.raises(SchemaError, match=message):
        write_partition(home, "rollouts", "e", 0, rows)
    assert commits(home, "rollouts") == []


def test_arrow_tables_are_cast_to_the_schema(tmp_path):
    home = tmp_path / "h"
    data = pa.table({"item_id": ["a"], "task": ["t"], "group_id": ["g"], "sample_index": pa.array([0], pa.int64())})
    commit = write_partition(home, "rollouts", "e", 0, data)
    assert pq.read_schema(commit.files[0]).field("sample_index").type == pa.int32()
    assert read_partition(home, "rollouts", "e").num_rows == 1


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (("nosuch", "e", 0), UnknownTableError),
        (("rollouts", "../escape", 0), LakeError),
        (("rollouts", "e", -1), LakeError),
    ],
)
def test_bad_names_give_one_line_errors(tmp_path, args, error):
    with pytest.raises(error) as info:
        write_partition(tmp_path, *args, rollout_rows(1, 1))
    assert "\n" not in str(info.value)


def test_bad_shard_name(tmp_path):
    with pytest.raises(LakeError, match="shard"):
        write_partition(tmp_path, "rollouts", "e", 0, rollout_rows(1, 1), shard="a.b")


def test_empty_commit_marks_the_shard_done(tmp_path):
    home = tmp_path / "h"
    write_partition(home, "rollouts", "e", 0, [])
    assert is_committed(home, "rollouts", "e", 0)
    assert _count(home) == 0


def test_unknown_experiment_and_iteration_name_what_exists(tmp_path):
    home = tmp_path / "h"
    write_partition(home, "rollouts", "a", 0, rollout_rows(1, 1))
    write_partition(home, "rollouts", "b", 2, rollout_rows(1, 1))
    with pytest.raises(UnknownPartitionError, match=r"unknown experiment 'x' in .*rollouts; known: a, b"):
        read_partition(home, "rollouts", "x")
    with pytest.raises(UnknownPartitionError, match=r"unknown iteration 5 .*known: 2"):
        read_partition(home, "rollouts", "b", 5)


def test_row_groups_aim_at_64_mib():
    small = pa.table({"x": list(range(10))})
    assert row_group_rows(small) == 128 * 1024
    wide = pa.table({"x": ["y" * 100_000] * 20})
    assert row_group_rows(wide) == 1024


def test_files_are_zstd(tmp_path):
    commit = write_partition(tmp_path, "rollouts", "e", 0, rollout_rows(2, 2))
    meta = pq.ParquetFile(commit.files[0]).metadata
    assert meta.row_group(0).column(0).compression == "ZSTD"

"""`aitp lake check`: bad files are reported by path and, with --repair, quarantined (never deleted)."""

import json
import os

import duckdb
import pytest

from aitp.lake import TABLES, check_lake, connect, is_committed, write_partition
from aitp.lake.errors import QueryError, UnknownTableError
from tests.lake.helpers import cli, rollout_rows


def _lake(tmp_path):
    home = tmp_path / "h"
    write_partition(home, "rollouts", "e", 0, rollout_rows(2, 2), shard="0")
    bad = write_partition(home, "rollouts", "e", 0, rollout_rows(3, 2), shard="1")
    write_partition(home, "rollouts", "e", 1, rollout_rows(1, 2))
    return home, bad.files[0]


def test_corrupt_file_is_reported_then_quarantined_and_the_table_reads_again(tmp_path):
    home, bad = _lake(tmp_path)
    original = open(bad, "rb").read()
    with open(bad, "r+b") as handle:  # a torn write / bit rot: the footer is gone
        handle.truncate(len(original) // 2)
    damaged = open(bad, "rb").read()

    query = cli("sql", "--home", str(home), "SELECT count(*) FROM rollouts")
    assert isinstance(query.exception, QueryError) and "aitp lake check" in str(query.exception)

    report = cli("lake", "check", "--home", str(home))
    assert report.exit_code == 1
    assert report.stdout.startswith(f"corrupt\t{bad}\t")
    assert is_committed(home, "rollouts", "e", 0, "1")

    repaired = cli("lake", "check", "--repair", "--home", str(home))
    assert repaired.exit_code == 0 and "nothing deleted" in repaired.stdout
    assert connect(home).execute("SELECT count(*) FROM rollouts").fetchone() == (4 + 2,)
    assert not is_committed(home, "rollouts", "e", 0, "1")  # a resumed stage would write it again

    moved = list((home / "lake/_quarantine").rglob("*.parquet"))
    assert [p.read_bytes() for p in moved] == [damaged]
    assert str(moved[0]).endswith("rollouts/experiment=e/iteration=0/" + bad.rsplit("/", 1)[1])
    (reasons,) = (home / "lake/_quarantine").rglob("QUARANTINE.json")
    assert json.loads(reasons.read_text())[0]["path"] == bad
    assert cli("lake", "check", "--home", str(home)).stdout == "lake ok (2 file(s) verified by checksum)\n"


def test_deep_check_reads_every_row_group(tmp_path):
    home, bad = _lake(tmp_path)
    data = bytearray(open(bad, "rb").read())
    data[4:40] = b"\xff" * 36  # garbage inside the first data page; the footer still parses
    open(bad, "wb").write(bytes(data))
    assert [p.kind for p in check_lake(home, deep=True)] == ["corrupt"]


def test_missing_file_and_bad_manifest(tmp_path):
    home, bad = _lake(tmp_path)
    os.remove(bad)
    manifest = home / "lake/rollouts/experiment=e/iteration=1/_commits/0.json"
    manifest.write_text("{not json")
    found = {(p.kind, p.path.rsplit("/", 1)[1]) for p in check_lake(home)}
    assert found == {("missing", bad.rsplit("/", 1)[1]), ("bad-manifest", "0.json")}
    with pytest.warns(UserWarning, match="unreadable manifest"):
        con = connect(home)
    with pytest.raises(duckdb.InvalidInputException, match=f"{bad} absent: run `aitp lake check --repair`"):
        con.execute("SELECT count(*) FROM rollouts").fetchall()
    assert con.execute("SELECT count(*) FROM evals").fetchone() == (0,)  # other tables still read
    assert all(p.repaired for p in check_lake(home, repair=True))
    assert check_lake(home) == []
    assert connect(home).execute("SELECT count(*) FROM rollouts").fetchone() == (4,)


def test_orphans_younger_than_the_grace_are_left_alone(tmp_path):
    home, _ = _lake(tmp_path)
    orphan = home / "lake/rollouts/experiment=e/iteration=1/0.stray.parquet"
    orphan.write_bytes(b"PAR1")
    assert check_lake(home) == []
    (problem,) = check_lake(home, grace_s=0)
    assert (problem.kind, problem.path) == ("orphan", str(orphan))
    assert connect(home).execute("SELECT count(*) FROM rollouts").fetchone() == (4 + 6 + 2,)


def test_lake_ls_lists_commits_and_rejects_unknown_tables(tmp_path):
    home, _ = _lake(tmp_path)
    rows = [line.split() for line in cli("lake", "ls", "--home", str(home)).stdout.splitlines()[2:-1]]
    assert rows == [["rollouts", "e", "0", "2", "10"], ["rollouts", "e", "1", "1", "2"]]
    result = cli("lake", "ls", "--table", "rollout", "--home", str(home))
    assert isinstance(result.exception, UnknownTableError)
    assert str(result.exception) == "unknown table 'rollout': use one of " + ", ".join(TABLES)


def test_lake_vacuum_deletes_only_replaced_files(tmp_path):
    home, _ = _lake(tmp_path)
    replaced = write_partition(home, "rollouts", "e", 1, rollout_rows(2, 2)).superseded
    assert cli("lake", "vacuum", "--home", str(home)).stdout == "0 replaced file(s) deleted\n"
    result = cli("lake", "vacuum", "--older-than-seconds", "0", "--home", str(home))
    assert result.stdout.splitlines() == [f"deleted\t{p}" for p in replaced] + ["1 replaced file(s) deleted"]
    assert connect(home).execute("SELECT count(*) FROM rollouts").fetchone() == (4 + 6 + 4,)
    assert check_lake(home, grace_s=0) == []

"""Checksums in the commit: plain `aitp lake check` finds bytes changed mid-file, truncations and vanished
partitions, each with its path; a bad table never stops queries on the others; old manifests still read."""

import json
import os
import random
import shutil

import duckdb
import pytest

from aitp.lake import check_lake, commits, connect, write_partition
from aitp.lake.check import check_report
from aitp.lake.integrity import file_checksum
from aitp.lake.storage import open_lake
from tests.lake.helpers import cli, rollout_rows


def _scribble(path: str, n: int = 2000, seed: int = 0) -> None:
    """Random bytes into the data pages of a file (its first half): the footer still parses, the pages do not."""
    size = os.path.getsize(path)
    with open(path, "r+b") as handle:
        handle.seek(size // 4)
        handle.write(random.Random(seed).randbytes(min(n, size // 4)))


def _lake(tmp_path):
    home = tmp_path / "h"
    rows = rollout_rows(200, 4)
    a = write_partition(home, "rollouts", "e", 0, rows, shard="a").files[0]
    b = write_partition(home, "rollouts", "e", 0, rows, shard="b").files[0]
    write_partition(home, "rollouts", "e", 1, rows, shard="a")
    write_partition(home, "evals", "e", 1, [{"model_version": "m", "task": "t", "n_pass": 1}], shard="m")
    return home, a, b


def test_manifest_records_size_and_digest_of_what_was_written(tmp_path):
    home, a, _ = _lake(tmp_path)
    (commit,) = [c for c in commits(home, "rollouts", "e", 0) if c.shard == "a"]
    assert commit.checksums[a] == file_checksum(open_lake(home), a)
    assert commit.checksums[a].size == os.path.getsize(a)
    index = home / "lake/_index/rollouts/experiment=e/iteration=0/a.json"
    assert json.loads(index.read_text())["commit_id"] == commit.commit_id


def test_plain_check_finds_scribbled_truncated_and_vanished_each_with_its_path(tmp_path):
    home, a, b = _lake(tmp_path)
    assert check_report(home).verified == 4 and check_lake(home) == []
    _scribble(a)
    with open(b, "r+b") as handle:
        handle.truncate(os.path.getsize(b) - 100)
    gone = home / "lake/rollouts/experiment=e/iteration=1"
    shutil.rmtree(gone)

    result = cli("lake", "check", "--home", str(home))
    assert result.exit_code == 1
    lines = {tuple(line.split("\t")[:2]) for line in result.stdout.splitlines()}
    assert lines == {("corrupt", a), ("corrupt", b), ("missing-partition", str(gone))}
    assert "checksum mismatch" in result.stdout and "truncated" in result.stdout

    repaired = cli("lake", "check", "--repair", "--home", str(home))
    assert repaired.exit_code == 0, repaired.stdout
    assert cli("lake", "check", "--home", str(home)).exit_code == 0
    assert list((home / "lake/_quarantine").rglob("_index/rollouts/experiment=e/iteration=1/a.json"))


def test_a_bad_table_names_its_file_and_leaves_the_others_readable(tmp_path):
    home, a, b = _lake(tmp_path)
    with open(b, "r+b") as handle:  # footer gone: DuckDB cannot even bind the table
        handle.truncate(os.path.getsize(b) // 2)
    con = connect(home, read_only=True)
    assert con.execute("SELECT sum(n_pass) FROM evals").fetchone() == (1,)
    with pytest.raises(duckdb.InvalidInputException, match=f"{b} is .* bytes.*aitp lake check --repair"):
        con.execute("SELECT count(*) FROM rollouts").fetchall()
    via_cli = cli("sql", "--home", str(home), "SELECT count(*) FROM pass_rate")
    assert b in str(via_cli.exception) and "aitp lake check --repair" in str(via_cli.exception)
    assert cli("sql", "--home", str(home), "SELECT count(*) FROM evals").exit_code == 0


def test_a_read_error_mid_file_names_the_file(tmp_path):
    home, a, _ = _lake(tmp_path)
    _scribble(a, n=4000, seed=1)
    result = cli("sql", "--home", str(home), "SELECT sum(length(completion)), sum(raw_score) FROM rollouts")
    assert result.exit_code != 0
    assert "table 'rollouts'" not in str(result.exception)  # the footer parsed: the error came mid-scan
    assert f"cannot read {a} checksum mismatch" in str(result.exception)
    assert "aitp lake check --repair" in str(result.exception)


def test_manifests_without_checksums_still_read_and_count_as_unverified(tmp_path):
    home, a, _ = _lake(tmp_path)
    manifest = home / "lake/rollouts/experiment=e/iteration=0/_commits/a.json"
    data = json.loads(manifest.read_text())
    del data["checksums"]  # what a commit made before checksums looks like
    manifest.write_text(json.dumps(data))
    report = check_report(home)
    assert (report.problems, report.verified, report.unverified) == ([], 3, 1)
    assert "1 unverified" in cli("lake", "check", "--home", str(home)).stdout
    assert connect(home).execute("SELECT count(*) FROM rollouts").fetchone() == (3 * 800,)

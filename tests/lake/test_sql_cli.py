"""`aitp sql`: reads answer, every kind of write is refused in one line, and nothing is written."""

import csv
import io
import json

import duckdb
import pytest

from aitp.errors import BadInputError
from aitp.home import MissingHomeError
from aitp.lake import CURATED_VIEWS, TABLES, connect, write_partition
from aitp.lake.errors import QueryError, ReadOnlyQueryError
from tests.lake.helpers import cli, cli_subprocess, rollout_rows


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    home = tmp_path_factory.mktemp("sql")
    write_partition(home, "rollouts", "e", 0, rollout_rows(3, 2))
    return home


def _lake_files(home):
    return sorted(str(p.relative_to(home)) for p in home.rglob("*"))


WRITES = [
    "INSERT INTO rollouts SELECT * FROM rollouts",
    "UPDATE rollouts SET raw_score = 1",
    "DELETE FROM rollouts",
    "CREATE TABLE t AS SELECT 1",
    "CREATE OR REPLACE VIEW pass_rate AS SELECT 1",
    "CREATE SECRET s (TYPE s3, KEY_ID 'k', SECRET 'x')",
    "DROP VIEW rollouts",
    "ALTER VIEW rollouts RENAME TO r",
    "COPY rollouts TO '{out}'",
    "COPY (SELECT * FROM rollouts) TO '{out}' (FORMAT parquet)",
    "EXPORT DATABASE '{out}'",
    "ATTACH '{out}' AS other",
    "DETACH memory",
    "INSTALL httpfs",
    "FORCE INSTALL httpfs",
    "LOAD httpfs",
    "PRAGMA force_checkpoint",
    "PRAGMA enable_profiling",
    "PRAGMA memory_limit = '1GB'",
    "SET enable_external_access = true",
    "RESET lock_configuration",
    "CALL pragma_version()",
    "CHECKPOINT",
    "EXPLAIN ANALYZE COPY rollouts TO '{out}'",
    "SELECT 1; COPY rollouts TO '{out}'",
    "/* looks harmless */ SELECT 1; DELETE FROM rollouts",
]


@pytest.mark.parametrize("statement", WRITES)
def test_writes_are_refused_in_one_line_and_nothing_changes(home, tmp_path, statement):
    out = tmp_path / "out.file"
    before = _lake_files(home)
    result = cli("sql", "--home", str(home), statement.format(out=out))
    assert isinstance(result.exception, ReadOnlyQueryError), result.output
    assert "\n" not in str(result.exception) and "refused" in str(result.exception)
    assert result.stdout == ""
    assert not out.exists()
    assert _lake_files(home) == before


@pytest.mark.parametrize(
    "statement",
    ["SELECT count(*) FROM rollouts", "FROM pass_rate", "DESCRIBE rollouts", "SHOW TABLES", "SUMMARIZE rollouts",
     "EXPLAIN SELECT 1", "EXPLAIN ANALYZE SELECT count(*) FROM rollouts", "PRAGMA table_info('rollouts')",
     "WITH x AS (SELECT 1 AS a) SELECT a FROM x", "PRAGMA version"],
)  # fmt: skip
def test_reads_are_allowed(home, statement):
    result = cli("sql", "--home", str(home), statement)
    assert result.exit_code == 0, result.exception


def test_the_connection_itself_cannot_write_or_read_outside_the_lake(home, tmp_path):
    """Even a statement the parser check missed finds external access off and settings locked."""
    con = connect(home, read_only=True)
    with pytest.raises(duckdb.PermissionException):
        con.execute(f"COPY rollouts TO '{tmp_path / 'x.csv'}'")
    with pytest.raises(duckdb.PermissionException):
        con.execute("SELECT * FROM read_csv('/etc/hostname')")
    with pytest.raises(duckdb.InvalidInputException, match="locked"):
        con.execute("SET enable_external_access = true")
    assert not (tmp_path / "x.csv").exists()
    assert con.execute("SELECT count(*) FROM rollouts").fetchone() == (6,)


def test_outputs_table_csv_and_json(home):
    query = "SELECT sample_index, count(*) AS n FROM rollouts GROUP BY 1 ORDER BY 1"
    table = cli("sql", "--home", str(home), query)
    assert table.stdout.splitlines()[0].split() == ["sample_index", "n"]
    assert "(2 rows)" in table.stdout
    as_csv = list(csv.reader(io.StringIO(cli("sql", "--home", str(home), "--format", "csv", query).stdout)))
    assert as_csv == [["sample_index", "n"], ["0", "3"], ["1", "3"]]
    as_json = json.loads(cli("sql", "--home", str(home), "--format", "json", query).stdout)
    assert as_json == [{"sample_index": 0, "n": 3}, {"sample_index": 1, "n": 3}]


def test_query_from_a_file(home, tmp_path):
    sql = tmp_path / "q.sql"
    sql.write_text("-- how many\nSELECT count(*) AS n FROM rollouts;\n")
    result = cli("sql", "--home", str(home), "--format", "csv", "-f", str(sql))
    assert result.stdout.splitlines() == ["n", "6"]


def test_no_query_lists_tables_and_views_with_columns(home):
    result = cli("sql", "--home", str(home))
    listed = {line.split(" ")[0]: line for line in result.stdout.splitlines()}
    assert set(listed) == set(TABLES) | set(CURATED_VIEWS)
    assert "completion VARCHAR" in listed["rollouts"] and "ci95_low DOUBLE" in listed["pass_rate"]
    as_json = json.loads(cli("sql", "--home", str(home), "--format", "json").stdout)
    assert {"name": "rollouts", "kind": "table", "column": "token_logprobs", "type": "FLOAT[]"} in as_json


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["SELECT * FROM no_such_table"], QueryError),
        (["SELEC 1"], QueryError),
        (["--format", "xml", "SELECT 1"], BadInputError),
        (["-f", "/no/such.sql"], BadInputError),
    ],
)
def test_bad_input_is_one_line(home, args, error):
    result = cli("sql", "--home", str(home), *args)
    assert isinstance(result.exception, error)
    assert "\n" not in str(result.exception)


def test_real_process_prints_one_line_and_exits_2(home):
    result = cli_subprocess("sql", "--home", str(home), "DROP VIEW rollouts")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.startswith("error: DROP statements are refused") and len(result.stderr.splitlines()) == 1


def test_unknown_table_names_the_fix(home):
    result = cli("sql", "--home", str(home), "SELECT * FROM rollout")
    assert str(result.exception).endswith("run `aitp sql` with no query to list the tables and views")


@pytest.mark.parametrize(
    "args",
    [["sql", "SELECT 1"], ["lake", "check"], ["lake", "ls"], ["lake", "vacuum"], ["export", "--experiment", "e"]],
)
def test_a_missing_home_is_refused_not_shown_as_an_empty_lake(tmp_path, args):
    missing = tmp_path / "no-such-home"
    result = cli(*args, "--home", str(missing))
    assert isinstance(result.exception, MissingHomeError) and f"aitp home {missing} does not exist" in str(
        result.exception
    )
    assert not missing.exists()

"""`aitp export --format atropos-jsonl`: the seed's dump format, one group per line."""

import json

import pytest

from aitp.errors import BadInputError
from aitp.lake import atropos_records, validate_atropos_record, write_partition
from aitp.lake.errors import UnknownPartitionError
from tests.lake.helpers import cli, cli_subprocess, rollout_rows

# The example of the seed's README, verbatim in structure.
SEED_EXAMPLE = {
    "item_id": "gsm_symbolic",
    "rollouts": [
        {
            "conversation": [
                {"role": "system", "content": "..."},
                {"role": "user", "content": "What is 2 + 3?"},
                {"role": "assistant", "content": "<think>2 + 3 = 5</think>\n<answer>5</answer>"},
            ],
            "score": 1.0,
        }
    ],
}


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    home = tmp_path_factory.mktemp("export")
    write_partition(home, "rollouts", "e", 0, rollout_rows(3, 2))
    write_partition(home, "rollouts", "e", 1, rollout_rows(2, 4, tag="late"))
    write_partition(home, "rollouts", "other", 0, rollout_rows(1, 1, final_score=None))
    return home


def test_the_validator_accepts_the_seed_example_and_rejects_near_misses():
    validate_atropos_record(SEED_EXAMPLE)
    broken = [
        {**SEED_EXAMPLE, "extra": 1},
        {**SEED_EXAMPLE, "item_id": 3},
        {**SEED_EXAMPLE, "rollouts": []},
        {**SEED_EXAMPLE, "rollouts": [{"conversation": SEED_EXAMPLE["rollouts"][0]["conversation"], "score": "1"}]},
        {**SEED_EXAMPLE, "rollouts": [{"conversation": [{"role": "user", "content": "q"}], "score": 1.0}]},
        {**SEED_EXAMPLE, "rollouts": [{"conversation": [{"role": "robot", "content": "a"}], "score": 1.0}]},
    ]
    for record in broken:
        with pytest.raises(BadInputError):
            validate_atropos_record(record)


def test_export_writes_one_valid_line_per_group(home, tmp_path):
    out = tmp_path / "dump.jsonl"
    result = cli("export", "--home", str(home), "--experiment", "e", "--format", "atropos-jsonl", "--out", str(out))
    assert result.exit_code == 0, result.exception
    records = [json.loads(line) for line in out.read_text().splitlines()]
    for record in records:
        validate_atropos_record(record)
    assert [len(r["rollouts"]) for r in records] == [2, 2, 2, 4, 4]
    first = records[0]
    assert first["item_id"] == "basic_arithmetic-item0"
    assert [m["role"] for m in first["rollouts"][0]["conversation"]] == ["system", "user", "assistant"]
    assert first["rollouts"][0]["conversation"][-1]["content"] == "v1: <answer>0</answer>"
    assert [r["score"] for r in first["rollouts"]] == [0.9, 0.0]
    assert list(tmp_path.iterdir()) == [out]  # the temporary file is gone


def test_iteration_and_kept_only_filters(home):
    one = list(atropos_records(home, "e", iteration=1))
    assert len(one) == 2 and all(r["rollouts"][0]["conversation"][-1]["content"].startswith("late") for r in one)
    kept = list(atropos_records(home, "e", iteration=0, kept_only=True))
    assert [r["item_id"] for r in kept] == ["basic_arithmetic-item0", "basic_arithmetic-item2"]


def test_missing_final_score_falls_back_to_the_strict_score(home):
    (record,) = atropos_records(home, "other")
    assert record["rollouts"][0]["score"] == 1.0


def test_stdout_export(home):
    result = cli("export", "--home", str(home), "--experiment", "e", "--iteration", "0")
    lines = result.stdout.splitlines()
    assert len(lines) == 3
    for line in lines:
        validate_atropos_record(json.loads(line))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--experiment", "nope"], r"unknown experiment 'nope' in .*rollouts; known: e, other"),
        (["--experiment", "e", "--iteration", "9"], r"unknown iteration 9 .*known: 0, 1"),
    ],
)
def test_unknown_experiment_or_iteration_is_one_line(home, tmp_path, args, message):
    out = tmp_path / "dump.jsonl"
    result = cli("export", "--home", str(home), *args, "--out", str(out))
    assert isinstance(result.exception, UnknownPartitionError)
    assert "\n" not in str(result.exception)
    with pytest.raises(UnknownPartitionError, match=message):
        raise result.exception
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_unknown_format_and_real_process_error(home):
    result = cli_subprocess("export", "--home", str(home), "--experiment", "e", "--format", "parquet")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.strip() == "error: unknown --format 'parquet': use atropos-jsonl"

"""`aitp rollout` as a user runs it: JSONL groups with the `aitp score` fields, one-line errors, no half files."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.rollouts.helpers import PYTHON, free_port, make_tiny_checkpoint, subprocess_env

SCORE_FIELDS = {"scores", "raw_scores", "lenient_scores", "format_errors", "extracted_answers", "completion_tokens"}


def aitp(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [PYTHON, "-m", "aitp", *args], env=subprocess_env(), capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture(scope="module")
def policy(tmp_path_factory):
    return str(make_tiny_checkpoint(tmp_path_factory.mktemp("ckpt") / "tiny"))


def test_rollout_writes_scored_groups_and_sample_rows(policy, tmp_path):
    out, samples = tmp_path / "groups.jsonl", tmp_path / "rows.jsonl"
    result = aitp(
        "rollout", "--policy", policy, "--task", "basic_arithmetic", "--n-items", "4", "--group-size", "2",
        "--seed", "7", "--max-tokens", "16", "--workers", "1", "--output", str(out), "--samples-output", str(samples),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    groups = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(groups) == 4
    for group in groups:
        assert SCORE_FIELDS | {"item_id", "task", "question", "answer", "completions"} <= set(group)
        assert len(group["completions"]) == len(group["scores"]) == 2
    rows = [json.loads(line) for line in samples.read_text().splitlines()]
    assert len(rows) == 8 and {r["item_id"] for r in rows} == {g["item_id"] for g in groups}
    assert "4/4" in result.stderr  # the progress bar reached the end
    assert sorted(p.name for p in tmp_path.iterdir()) == ["groups.jsonl", "rows.jsonl"]  # no temp files left


def _assert_one_line_error(result: subprocess.CompletedProcess, *needles: str) -> None:
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for needle in needles:
        assert needle in lines[0]


def test_missing_policy_path(tmp_path):
    out = tmp_path / "out.jsonl"
    result = aitp("rollout", "--policy", str(tmp_path / "nope"), "--task", "basic_arithmetic", "-o", str(out))
    _assert_one_line_error(result, "does not exist", "checkpoint directory")
    assert not out.exists()


def test_scheduler_that_does_not_answer(policy, tmp_path):
    out = tmp_path / "out.jsonl"
    address = f"tcp://127.0.0.1:{free_port()}"
    result = aitp(
        "rollout", "--policy", policy, "--task", "basic_arithmetic", "--dask-address", address,
        "--connect-timeout", "1", "-o", str(out),
    )  # fmt: skip
    _assert_one_line_error(result, address, "dask scheduler", "drop --dask-address")
    assert list(tmp_path.iterdir()) == []


def test_server_that_refuses(tmp_path):
    out = tmp_path / "out.jsonl"
    spec = json.dumps({"backend": "openai", "base_url": f"http://127.0.0.1:{free_port()}/v1", "retries": 0})
    result = aitp("rollout", "--policy", spec, "--task", "basic_arithmetic", "-o", str(out))
    _assert_one_line_error(result, "cannot connect", "aitp serve")
    assert list(tmp_path.iterdir()) == []


def test_bad_flag_values(policy):
    _assert_one_line_error(aitp("rollout", "--policy", policy, "--task", "basic_arithmetic", "--group-size", "0"))


@pytest.mark.parametrize(
    ("policy", "needle"),
    [("hf", "--model-path"), ("openai", "--base-url"), ("{oops", "JSON"), ("tiny:/no/such/dir", "does not exist")],
)
def test_policy_option_errors_name_the_fix(policy, needle):
    from aitp.cli.rollout import policy_spec
    from aitp.errors import BadInputError

    with pytest.raises(BadInputError, match=needle):
        policy_spec(policy)


def test_policy_option_forms(tmp_path):
    from aitp.cli.rollout import policy_spec
    from aitp.policies.spec import PolicySpec

    assert policy_spec("tiny") == PolicySpec(backend="tiny")
    assert policy_spec(str(tmp_path)) == PolicySpec(path=str(tmp_path))
    assert policy_spec(f"hf:{tmp_path}") == PolicySpec(backend="hf", path=str(tmp_path))
    spec = policy_spec("openai", base_url="http://h:1/v1", model="m", endpoint="completions")
    assert spec.backend == "openai" and spec.model == "m" and spec.endpoint == "completions"
    assert policy_spec("openai:http://h:1/v1").base_url == "http://h:1/v1"

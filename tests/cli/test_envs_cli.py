"""`aitp tasks | items | score` end to end through a real subprocess, bad input included."""

import json
import subprocess
import sys

import pytest


def aitp(*args, stdin=None):
    return subprocess.run(
        [sys.executable, "-m", "aitp", *args], input=stdin, capture_output=True, text=True, timeout=300
    )


def test_every_command_has_help():
    for command in ([], ["tasks"], ["items"], ["score"]):
        result = aitp(*command, "--help")
        assert result.returncode == 0 and "Usage" in result.stdout


def test_tasks_lists_name_category_curriculum():
    lines = aitp("tasks").stdout.strip().splitlines()
    assert len(lines) >= 100
    name, category, curriculum = lines[0].split("\t")[:3]
    assert name and category and curriculum in ("curriculum", "no-curriculum")


def test_items_then_score_round_trip(tmp_path):
    out = aitp("items", "--task", "basic_arithmetic", "--n", "3", "--seed", "1", "--split", "eval", "--difficulty", "1")
    assert out.returncode == 0, out.stderr
    lines = [json.loads(x) for x in out.stdout.splitlines()]
    assert [x["level"] for x in lines] == [1, 1, 1]
    groups = []
    for x in lines:
        gold = x["answer"]
        x["completions"] = [
            f"<think>ok</think><answer>{gold}</answer>",
            "no tags",
            "<answer>1</answer><answer>2</answer>",
        ]
        groups.append(json.dumps(x))
    scored = aitp("score", "--max-token-length", "512", stdin="\n".join(groups) + "\n")
    assert scored.returncode == 0, scored.stderr
    for line in scored.stdout.splitlines():
        row = json.loads(line)
        assert row["raw_scores"] == [1.0, 0.0, 0.0]
        assert row["format_errors"] == [None, "no_answer_tag", "multiple_answer_tags"]
        assert len(row["scores"]) == len(row["lenient_scores"]) == 3


def test_length_penalty_is_applied_on_completion_tokens():
    item = json.loads(aitp("items", "--task", "spell_backward", "--n", "1", "--seed", "2").stdout)
    long = "<think>" + "x" * 200 + f"</think><answer>{item['answer']}</answer>"
    item["completions"] = [long, long]
    row = json.loads(aitp("score", "--max-token-length", "200", stdin=json.dumps(item)).stdout)
    assert row["raw_scores"] == [1.0, 1.0] and row["scores"] == [0.0, 0.0]


@pytest.mark.parametrize(
    "args, message",
    [
        (["items", "--task", "gdc"], "did you mean gcd"),
        (["items", "--task", "gcd", "--n", "-2"], "--n must be zero or more"),
        (["items", "--task", "gcd", "--difficulty", "hard"], "unknown difficulty 'hard'"),
        (["score", "--input", "/nonexistent.jsonl"], "does not exist"),
    ],
)
def test_bad_arguments_give_one_line_errors(args, message):
    result = aitp(*args)
    assert result.returncode != 0
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_bad_line_keeps_good_lines_and_names_the_line(tmp_path):
    item = json.loads(aitp("items", "--task", "gcd", "--n", "1").stdout)
    good = json.dumps({**item, "completions": [f"<answer>{item['answer']}</answer>"]})
    no_completions = json.dumps(item)
    path = tmp_path / "groups.jsonl"
    path.write_text("\n".join([good, good, "{not json", good]) + "\n")
    result = aitp("score", "--input", str(path))
    assert result.returncode != 0
    assert "line 3" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert len(result.stdout.splitlines()) == 2
    path.write_text("\n".join([good, no_completions]) + "\n")
    result = aitp("score", "--input", str(path))
    assert "line 2" in result.stderr and "completions" in result.stderr
    assert len(result.stdout.splitlines()) == 1
    missing_identity = json.dumps({"question": "q", "completions": ["a"]})
    result = aitp("score", stdin=missing_identity)
    assert result.returncode != 0 and "line 1" in result.stderr and "task" in result.stderr

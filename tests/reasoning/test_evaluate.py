"""A fixed, versioned eval set: metrics with 95% intervals, rows in the lake, a pinned version, bad input."""

import shutil

import pytest

from aitp.checkpoints import CheckpointError, verify_checkpoint
from aitp.evals import EvalSetChangedError, load_eval, pinned_eval_name
from aitp.lake import connect
from aitp.paired import wilson
from aitp.reasoning.evaluate import EvalConfig, build_eval_set, evaluate
from tests.train.helpers import SYSTEM, tiny_base

CONFIG = EvalConfig(tasks=["basic_arithmetic", "leg_counting"], n_per_task=4, max_tokens=8, system_prompt=SYSTEM)


def test_wilson_interval_brackets_the_rate():
    assert wilson(0, 0) == (0.0, 1.0)
    low, high = wilson(5, 10)
    assert low < 0.5 < high and low == pytest.approx(0.2366, abs=1e-3) and high == pytest.approx(0.7634, abs=1e-3)
    assert wilson(0, 100)[0] == pytest.approx(0.0, abs=1e-12) and wilson(100, 100)[1] == pytest.approx(1.0)


def test_version_hashes_item_identities_and_protocol():
    a, b = build_eval_set(CONFIG), build_eval_set(CONFIG)
    assert a.version == b.version and len(a.items) == 8
    assert build_eval_set(CONFIG.model_copy(update={"n_per_task": 5})).version != a.version
    assert build_eval_set(CONFIG.model_copy(update={"seed": 1})).version != a.version
    assert build_eval_set(CONFIG.model_copy(update={"temperature": 0.7})).version != a.version
    assert a.eval_name == f"heldout@{a.version}"


def test_evaluate_writes_per_task_rows_and_pins_the_eval_set(tmp_path):
    base = tiny_base(tmp_path / "base")
    result = evaluate(tmp_path, "e", 0, base, CONFIG)
    assert [r["task"] for r in result.rows] == ["basic_arithmetic", "leg_counting"]
    m = result.metrics()
    assert m["n_samples"] == 8 and m["pass_rate"] == 0.0 and m["format_error_rate"] == 1.0
    assert m["pass_rate_ci95_low"] == 0.0 < m["pass_rate_ci95_high"] < 1.0
    assert "leg_counting/pass_rate" in m and m["mean_completion_tokens"] == 8.0
    assert len(result.samples) == 8 and all(s["format_error"] for s in result.samples)
    assert pinned_eval_name(tmp_path, "e", "heldout") == result.eval_name

    con = connect(tmp_path)
    n_eval_items = con.execute("SELECT count(*) FROM items WHERE split = 'eval'").fetchone()[0]
    n_rows = con.execute("SELECT count(*) FROM evals WHERE eval_name = $n", {"n": result.eval_name}).fetchone()[0]
    assert (n_eval_items, n_rows) == (8, 2)
    again = load_eval(tmp_path, "e", result.model_version, result.eval_name)
    assert again.metrics() == pytest.approx(m)


def test_an_eval_set_that_changed_under_an_experiment_is_refused(tmp_path):
    base = tiny_base(tmp_path / "base")
    evaluate(tmp_path, "e", 0, base, CONFIG)
    with pytest.raises(EvalSetChangedError, match="restore the eval config") as err:
        evaluate(tmp_path, "e", 1, base, CONFIG.model_copy(update={"n_per_task": 5}))
    assert "\n" not in str(err.value)
    evaluate(tmp_path, "other", 0, base, CONFIG.model_copy(update={"n_per_task": 5}))  # another experiment: fine


def test_missing_or_incomplete_checkpoints_are_one_line_errors(tmp_path):
    with pytest.raises(CheckpointError, match="does not exist"):
        evaluate(tmp_path, "e", 0, tmp_path / "nowhere", CONFIG)
    base = tiny_base(tmp_path / "base")
    cut = tmp_path / "cut"
    shutil.copytree(base, cut)
    weights = cut / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-100])
    with pytest.raises(CheckpointError, match="truncated model.safetensors"):
        evaluate(tmp_path, "e", 0, cut, CONFIG)
    weights.unlink()
    with pytest.raises(CheckpointError, match="no weights"):
        verify_checkpoint(cut)
    (cut / "config.json").unlink()
    with pytest.raises(CheckpointError, match="no config.json"):
        verify_checkpoint(cut)
    assert pinned_eval_name(tmp_path, "e", "heldout") is None  # nothing was written

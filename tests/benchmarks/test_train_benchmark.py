"""The training benchmark's repeats: strategies alternate their order, and each setting's medians are compared."""

from __future__ import annotations

import importlib.util
import itertools
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(REPO / "benchmarks"))  # train.py imports its sibling rollouts.py
    had_rollouts = "rollouts" in sys.modules
    try:
        spec = importlib.util.spec_from_file_location("train_benchmark", REPO / "benchmarks" / "train.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
        if not had_rollouts:
            sys.modules.pop("rollouts", None)


def test_repeats_alternate_which_strategy_runs_first(bench):
    orders = list(itertools.islice(bench.alternating(["single", "deepspeed"]), 4))
    assert orders == [["single", "deepspeed"], ["deepspeed", "single"]] * 2


def test_medians_compare_each_setting_s_strategies_over_their_repeats(bench):
    def row(strategy, batch, rate, repeat):
        setting = {"batch": batch, "compile": "off", "head": "fused", "attention": "default"}
        return {**setting, "strategy": strategy, "tokens_per_s": rate, "repeat": repeat}

    rows = [
        row("single (bf16-mixed)", 32, 60.0, 0),
        row("deepspeed ZeRO-2", 32, 40.0, 0),
        row("deepspeed ZeRO-2", 32, 50.0, 1),
        row("single (bf16-mixed)", 32, 50.0, 1),
        row("single (bf16-mixed)", 32, 55.0, 2),
        row("deepspeed ZeRO-2", 32, 44.0, 2),
        row("deepspeed ZeRO-2", 64, 70.0, 0),  # a setting plain did not run in
    ]
    got = {(m["batch"], m["strategy"]): m for m in bench.medians(rows)}
    assert got[(32, "single (bf16-mixed)")]["median"] == 55.0 and got[(32, "single (bf16-mixed)")]["runs"] == 3
    assert got[(32, "deepspeed ZeRO-2")]["median"] == 44.0
    assert got[(32, "deepspeed ZeRO-2")]["vs_plain"] == pytest.approx(44.0 / 55.0)
    assert got[(64, "deepspeed ZeRO-2")]["vs_plain"] is None

"""The statistics of comparing models: the same digits as before they had one home, in Python and in SQL."""

from __future__ import annotations

import duckdb
import numpy as np
import pytest

from aitp.paired import Z95, PairedGain, gain_on_shared_items, paired_bootstrap, wilson, wilson_sql


def test_the_paired_bootstrap_keeps_its_digits():
    a, b = np.array([1, 0, 0, 1, 0, 1, 0, 0.0]), np.array([1, 1, 0, 1, 1, 1, 0, 1.0])
    assert paired_bootstrap(a, b) == (0.375, 0.125, 0.75)
    a, b = np.array([0.25, 0.5, 1.0, 0.0]), np.array([0.5, 0.5, 0.75, 0.25])
    assert paired_bootstrap(a, b, n_boot=200, seed=3) == (0.0625, -0.12656249999999997, 0.25)


def test_a_gain_is_paired_over_the_shared_items_in_item_order():
    a = {"q3": 0.5, "q1": 1.0, "q2": 0.0, "only-a": 1.0}
    b = {"q2": 1.0, "q1": 1.0, "q3": 0.25, "only-b": 0.0}
    gain = gain_on_shared_items(a, b, "old", "new", n_boot=500)
    diff = paired_bootstrap(np.array([1.0, 0.0, 0.5]), np.array([1.0, 1.0, 0.25]), n_boot=500)
    assert gain == PairedGain("old", "new", 3, 0.5, 0.75, *diff)
    assert gain_on_shared_items({"x": True}, {"y": True}, "a", "b") is None


def test_the_wilson_interval_keeps_its_digits():
    assert wilson(0, 0) == (0.0, 1.0)
    assert wilson(5, 10) == (0.236593090512564, 0.7634069094874361)
    assert wilson(0, 100) == (3.469446951953614e-18, 0.03699349820698568)
    assert wilson(37, 200) == (0.13730192800616042, 0.2445706276115175)


@pytest.mark.parametrize(("k", "n"), [(0, 1), (1, 1), (5, 10), (0, 100), (37, 200), (999, 1000)])
def test_the_sql_wilson_interval_is_the_python_one(k, n):
    low, high = wilson_sql("rate", "n")
    sql = f"SELECT {low}, {high} FROM (SELECT {k} / {n}::DOUBLE AS rate, {n} AS n, {Z95}::DOUBLE AS z)"
    assert duckdb.connect().execute(sql).fetchone() == pytest.approx(wilson(k, n), abs=1e-15)

"""The peer comparison's pure parts: the portfolio's order; the table pairs provers and counts the rule's refusals."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _script():
    spec = importlib.util.spec_from_file_location("prove_peers", REPO / "benchmarks" / "prove_peers.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["prove_peers"] = module  # its dataclass looks its module up by name
    spec.loader.exec_module(module)
    return module


def test_the_portfolio_chains_the_peers_and_leaves_hammer_the_rest():
    script = _script()
    assert script.PEER_TACTICS["portfolio"] == [*script.COQ_AUTO, "sauto", "hammer"]
    assert script.PEER_TACTICS["portfolio"][-1] == "hammer" and 0 < script.CHEAP_SHARE < 1


def test_table_counts_union_and_pairs():
    script = _script()
    attempts = [
        script.Attempt("t1", "a", True, 1.0, "auto", "ok"),
        script.Attempt("t2", "a", False, 3.0, "lia", "proof depends on the theorem being proved: t2"),
        script.Attempt("t1", "b", True, 2.0, "sauto", "ok"),
        script.Attempt("t2", "b", True, 4.0, "sauto", "ok"),
    ]
    report = script.table(attempts, ["a", "b"], ["t1", "t2"], 10.0)
    assert "| a (10 s cap) | 1/2 |" in report and "| b (10 s cap) | 2/2 |" in report
    assert report.splitlines()[2].endswith("| 1 |") and report.splitlines()[3].endswith("| 0 |")  # refused
    assert "| union of the above | 2/2 |" in report
    assert "| b − a | +0.500 |" in report and report.rstrip().endswith("| 0 | 1 |")

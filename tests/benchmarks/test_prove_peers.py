"""The peer comparison's pure parts: a hammer proof citing later lemmas is refused; the table pairs provers."""

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


def test_hammer_proofs_may_cite_only_earlier_lemmas():
    script = _script()
    premises = ["Coq.Init.Logic.eq_sym", "Coq.Arith.PeanoNat.Nat.add_0_r"]
    assert script.premise_refusal("hauto lq: on use: Nat.add_0_r, eq_sym", premises) == ""
    assert script.premise_refusal("sfirstorder", premises) == ""
    refusal = script.premise_refusal("hauto use: Nat.add_0_r, Nat.add_comm", premises)
    assert refusal == "use: lemmas not stated before the theorem: Nat.add_comm"


def test_table_counts_union_and_pairs():
    script = _script()
    attempts = [
        script.Attempt("t1", "a", True, 1.0, "auto", "ok"),
        script.Attempt("t2", "a", False, 3.0, "", "no"),
        script.Attempt("t1", "b", True, 2.0, "sauto", "ok"),
        script.Attempt("t2", "b", True, 4.0, "sauto", "ok"),
    ]
    report = script.table(attempts, ["a", "b"], ["t1", "t2"], 10.0)
    assert "| a (10 s cap) | 1/2 |" in report and "| b (10 s cap) | 2/2 |" in report
    assert "| union of the above | 2/2 |" in report
    assert "| b − a | +0.500 |" in report and report.rstrip().endswith("| 0 | 1 |")

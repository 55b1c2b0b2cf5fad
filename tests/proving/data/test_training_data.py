"""Training data selected from a real lake of Coq searches: re-checked train proofs only, never valid/test."""

from __future__ import annotations

from aitp.proving.data.theorem_set import split_of
from aitp.proving.data.training_data import best_proofs, select_training_data


def test_only_rechecked_train_proofs_become_training_data(coq_trace_lake):
    home, library, searched, evaluated, unverified = coq_trace_lake
    data = select_training_data(home, "e", 2, library)
    proved_train = {a.theorem for a in searched.attempts if a.proved}
    assert proved_train, "the Bool train theorems should yield some proofs"
    assert {p.theorem for p in data.proofs} == proved_train
    # valid theorems (even a search of one labelled train) and never re-checked proofs stay out
    assert any(a.proved for a in evaluated.attempts) and any(row["proofs"] for row in [evaluated.rows])
    assert any(not r["verified"] for r in unverified.rows["proofs"])
    theorems = {e.theorem for e in data.tactics} | {p.theorem for p in data.pairs} | {p.theorem for p in data.premises}
    assert theorems <= proved_train
    assert all(split_of(t) == "train" for t in theorems)
    assert not theorems & {a.theorem for a in evaluated.attempts + unverified.attempts}
    # one tactic example per step of each selected proof, on the goal it was applied to
    steps = {p.theorem: p.n_steps for p in data.proofs}
    for theorem, n in steps.items():
        assert sum(e.theorem == theorem for e in data.tactics) == n
    assert all(e.goal and "⊢" in e.goal for e in data.tactics)
    # preference pairs: the proving tactic over one that errored on the same goal
    assert data.pairs and all(p.chosen != p.rejected for p in data.pairs)


def test_the_iteration_bound_is_respected(coq_trace_lake):
    home, library, *_ = coq_trace_lake
    assert (
        best_proofs(
            home,
            "e",
            0,
        )
        == []
    )
    assert {p.iteration for p in best_proofs(home, "e", 1)} == {1}

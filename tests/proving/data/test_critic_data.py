"""Goal-critic labels from a real lake of Coq searches: proof-path goals 1, visited unproved goals 0, train only."""

from __future__ import annotations

import pytest

from aitp.errors import BadInputError
from aitp.proving.data.critic_data import critic_examples, held_out_goal_labels
from aitp.proving.data.theorem_set import split_of


def test_proof_path_goals_are_1_and_visited_unproved_goals_are_0(coq_trace_lake):
    home, library, searched, evaluated, unverified = coq_trace_lake
    examples = critic_examples(home, "e", 2)
    labels = {e.goal: e.label for e in examples}
    assert len(labels) == len(examples)  # one label per goal text
    nodes = searched.rows["proof_nodes"] + unverified.rows["proof_nodes"]  # the train theorems' searches
    rechecked = {p["search_id"] for p in searched.rows["proofs"] + unverified.rows["proofs"] if p["verified"]}
    on_proof = {n["goal"] for n in nodes if n["in_proof"] and n["search_id"] in rechecked}
    visited_unproved = {n["goal"] for n in nodes if n["expanded_at_step"] is not None and n["status"] != "proved"}
    assert on_proof and visited_unproved
    assert {g for g, y in labels.items() if y == 1} == on_proof
    assert {g for g, y in labels.items() if y == 0} == visited_unproved - on_proof  # proved once: provable
    # goals never expanded (and never on a proof path) are neither
    unseen = {n["goal"] for n in nodes} - visited_unproved - on_proof
    assert unseen and not unseen & set(labels)
    assert all(e.visits >= 1 for e in examples if e.label == 0)


def test_the_visit_threshold_is_respected(coq_trace_lake):
    home, *_ = coq_trace_lake
    # BestFS visits a goal once, when it expands it: two visits leave only the proved goals
    examples = critic_examples(home, "e", 2, min_visits=2)
    assert examples and all(e.label == 1 for e in examples)
    with pytest.raises(BadInputError, match="at least 1"):
        critic_examples(home, "e", 2, min_visits=0)


def test_no_valid_or_unchecked_goal_reaches_critic_training_data(coq_trace_lake):
    home, library, searched, evaluated, unverified = coq_trace_lake
    examples = critic_examples(home, "e", 2)
    theorems = {e.theorem for e in examples}
    assert all(split_of(t) == "train" for t in theorems)
    # the valid searches (one of them stored with a wrong `train` label) stay out, by split and by name
    assert not theorems & {a.theorem for a in evaluated.attempts}
    # the proof that was never re-checked labels nothing 1
    unchecked = {a.theorem for a in unverified.attempts}
    assert any(r["in_proof"] for r in unverified.rows["proof_nodes"])
    assert not [e for e in examples if e.theorem in unchecked and e.label == 1]
    # held-out labels measure a critic on valid goals, and are refused for train
    held_out = held_out_goal_labels(home, "e", 2)
    assert held_out and all(split_of(e.theorem) == "valid" for e in held_out)
    assert {e.theorem for e in held_out} <= {a.theorem for a in evaluated.attempts}
    with pytest.raises(BadInputError, match="critic_examples"):
        held_out_goal_labels(home, "e", 2, split="train")

"""The goal-conditioned tactic ranker learns from real proofs and generalises to goals it never saw."""

from __future__ import annotations

import numpy as np

from aitp.proving.candidates import CandidateGenerator
from aitp.proving.env import Goal
from aitp.proving.prover_training import ranking_examples
from aitp.proving.tactic_ranker import TacticRanker, fit_ranker
from aitp.proving.training_data import tactic_examples


def _prefers_proving(ranker, generator, examples) -> float:
    """Share of (proving, erroring) tactic pairs on a goal that the ranker orders right."""
    right = total = 0
    for ex in examples:
        goal = Goal(ex.goal, ex.theorem)
        for bad in ex.erroring:
            good, worse = generator.candidate_for(goal, ex.tactic), generator.candidate_for(goal, bad)
            if good is None or worse is None:
                continue
            logits = ranker.logits(ex.goal, [good, worse])
            right += logits[0] > logits[1]
            total += 1
    return right / max(total, 1)


def test_ranker_learns_to_prefer_proving_tactics_on_held_out_goals(coq_trace_lake):
    home, library, *_ = coq_trace_lake
    examples = tactic_examples(home, "e", 2)
    theorems = sorted({e.theorem for e in examples})
    held_out = set(theorems[::3])  # whole theorems are held out, not just goals
    train = [e for e in examples if e.theorem not in held_out]
    test = [e for e in examples if e.theorem in held_out and e.erroring]
    assert train and test
    generator = CandidateGenerator("coq", library)
    untrained = TacticRanker()
    before = _prefers_proving(untrained, generator, test)
    ranker = TacticRanker()
    losses = fit_ranker(ranker, ranking_examples(train, generator), epochs=10)
    assert losses[-1] < losses[0]
    after = _prefers_proving(ranker, generator, test)
    assert after > before and after >= 0.6, (before, after)


def test_the_learned_term_is_bounded_and_untrained_is_the_default_order(coq_trace_lake):
    home, library, *_ = coq_trace_lake
    generator = CandidateGenerator("coq", library)
    examples = ranking_examples(tactic_examples(home, "e", 2), generator)
    ranker = TacticRanker()
    ex = examples[0]
    assert np.allclose(ranker.logits(ex.goal_text, ex.candidates), ranker.default_logits(ex.candidates))
    fit_ranker(ranker, examples * 20, epochs=20, lr=0.5)  # drive it hard: it still cannot collapse the prior
    moved = ranker.logits(ex.goal_text, ex.candidates) - ranker.default_logits(ex.candidates)
    assert np.abs(moved).max() <= ranker.config.bound + 1e-9 and np.abs(moved).max() > 0.1

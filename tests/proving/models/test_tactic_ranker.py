"""The goal-conditioned tactic ranker learns from real proofs and generalises to goals it never saw."""

from __future__ import annotations

import numpy as np

from aitp.proving.data.training_data import tactic_examples
from aitp.proving.models.candidates import CandidateGenerator
from aitp.proving.models.tactic_ranker import TacticRanker, fit_ranker
from aitp.proving.models.training import ranking_examples


def _mean_rank(ranker, examples) -> float:
    """Mean number of candidates the ranker puts at or above the proving tactic (1 is best)."""
    ranks = []
    for ex in examples:
        logits = ranker.logits(ex.goal_text, ex.candidates)
        ranks.append(int((logits >= logits[ex.positive]).sum()))
    return sum(ranks) / len(ranks)


def _top_k_hits(ranker, examples, k: int = 4) -> float:
    """Share of held-out goals whose proving tactic the ranker puts in its top k (ties count against it)."""
    hits = 0
    for ex in examples:
        logits = ranker.logits(ex.goal_text, ex.candidates)
        hits += int((logits >= logits[ex.positive]).sum()) <= k
    return hits / len(examples)


def _erroring_below(ranker, examples) -> float:
    """Share of (proving, erroring) tactic pairs of a goal that the ranker orders right."""
    right = total = 0
    for ex in examples:
        logits = ranker.logits(ex.goal_text, ex.candidates)
        for bad in ex.negatives:
            right += logits[ex.positive] > logits[bad]
            total += 1
    return right / max(total, 1)


def test_ranker_learns_to_prefer_proving_tactics_on_held_out_goals(coq_trace_lake):
    home, library, *_ = coq_trace_lake
    tactics = tactic_examples(home, "e", 2)
    examples = ranking_examples(tactics, CandidateGenerator("coq", library))
    theorems = sorted({t.theorem for t in tactics})
    assert len(theorems) >= 4
    trained_hits = untrained_hits = right = pairs = 0
    trained_rank = untrained_rank = 0.0
    for fold in range(4):  # whole theorems are held out: their goals are never seen in training
        held_out = set(theorems[fold::4])
        train = [e for e, t in zip(examples, tactics) if t.theorem not in held_out]
        test = [e for e, t in zip(examples, tactics) if t.theorem in held_out]
        ranker = TacticRanker()
        losses = fit_ranker(ranker, train)
        assert losses[-1] < losses[0]
        trained_hits += _top_k_hits(ranker, test) * len(test)
        untrained_hits += _top_k_hits(TacticRanker(), test) * len(test)
        trained_rank += _mean_rank(ranker, test) * len(test)
        untrained_rank += _mean_rank(TacticRanker(), test) * len(test)
        n = sum(len(e.negatives) for e in test)
        right += _erroring_below(ranker, test) * n
        pairs += n
    assert trained_rank < untrained_rank, (trained_rank / len(examples), untrained_rank / len(examples))
    assert trained_hits >= untrained_hits, (trained_hits, untrained_hits)
    assert pairs and right / pairs >= 0.6, (right, pairs)


def test_the_learned_term_is_bounded_and_untrained_is_the_default_order(coq_trace_lake):
    home, library, *_ = coq_trace_lake
    generator = CandidateGenerator("coq", library)
    examples = ranking_examples(tactic_examples(home, "e", 2), generator)
    ranker = TacticRanker()
    ex = examples[0]
    assert np.allclose(ranker.logits(ex.goal_text, ex.candidates), ranker.default_logits(ex.candidates))
    fit_ranker(ranker, examples, epochs=10, lr=1.0)  # drive it hard: it still cannot collapse the prior
    moved = ranker.logits(ex.goal_text, ex.candidates) - ranker.default_logits(ex.candidates)
    assert np.abs(moved).max() <= ranker.config.bound + 1e-9 and np.abs(moved).max() > 0.1

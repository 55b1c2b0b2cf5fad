"""Iteration stages: train slices of the train split only, and promotion only on a strict paired gain."""

from __future__ import annotations

import random

from aitp.proving.data.theorem_set import TheoremSet, split_of
from aitp.proving.env import Theorem
from aitp.proving.learning import decide_promotion, paired_proof_gain, train_slice

LIBRARY = TheoremSet("s", "coq", [Theorem(f"T{i}", "True", "coq") for i in range(200)], [f"T{i}" for i in range(200)])


def test_train_slices_are_fixed_disjoint_and_train_only():
    first, second = train_slice(LIBRARY, 0, 20), train_slice(LIBRARY, 1, 20)
    assert [t.name for t in first] == [t.name for t in train_slice(LIBRARY, 0, 20)]
    assert not {t.name for t in first} & {t.name for t in second}
    assert all(split_of(t.name) == "train" for t in first + second)
    n_train = len(LIBRARY.split("train"))
    assert len({t.name for i in range(n_train // 20 + 1) for t in train_slice(LIBRARY, i, 20)}) == n_train


def test_promotion_needs_a_strict_gain_on_the_same_theorems():
    champion = {f"T{i}": i < 10 for i in range(100)}
    same = dict(champion)
    better = {f"T{i}": i < 30 for i in range(100)}
    assert not decide_promotion(champion, same).promote
    decision = decide_promotion(champion, better)
    assert decision.promote and decision.gain.gain == 0.2 and decision.gain.low > 0
    worse_elsewhere = {**better, "T0": False}
    assert paired_proof_gain(champion, worse_elsewhere).gain < decision.gain.gain


def test_promotion_on_theorems_is_the_registry_rule_on_proof_counts():
    """The decisions `decide_promotion` made before it asked `aitp.registry.promotion.decide`, for min_gain >= 1."""
    rng = random.Random(0)
    for _ in range(300):
        names = [f"T{i}" for i in range(rng.randint(1, 60))]
        champion = {t: rng.random() < 0.4 for t in names}
        challenger = {t: rng.random() < 0.5 for t in rng.sample(names, rng.randint(1, len(names)))}
        shared = set(champion) & set(challenger)
        more = sum(challenger[t] for t in shared) - sum(champion[t] for t in shared)
        for min_gain in (1, 2, 3, 5):
            decision = decide_promotion(champion, challenger, min_gain)
            assert decision.promote == (more >= min_gain)
            assert decision.reason.startswith(f"challenger {'proves' if decision.promote else 'does not prove'} ")
    champion, challenger = {f"T{i}": i % 3 == 0 for i in range(30)}, {f"T{i}": i % 2 == 0 for i in range(30)}
    reason = "challenger proves 1+ more valid theorems (+5; gain +0.167 (95% -0.067 to +0.400, 30 items))"
    assert decide_promotion(champion, challenger).reason == reason
    assert not decide_promotion(champion, challenger, 6).promote and decide_promotion(champion, challenger, 5).promote
    assert not decide_promotion(champion, dict(champion), 0).promote  # a tie is no gain, whatever the margin


def test_training_on_nothing_is_a_typed_error():
    import pytest

    from aitp.proving.data.training_data import TrainingData
    from aitp.proving.models.training import train_prover_models
    from aitp.train.data import NoTrainingDataError

    empty = TrainingData([], [], [], [])
    with pytest.raises(NoTrainingDataError, match="no re-checked proof"):
        train_prover_models(empty, LIBRARY)
    assert not train_prover_models(empty, LIBRARY, learn=False).ranker.trained

"""The goal critic: an untrained critic is a coin flip, a trained one ranks held-out goals, AUC is the textbook one."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from aitp.proving.env import Goal
from aitp.proving.models.goal_critic import GoalCritic, auc, fit_critic


def _goal(rng: random.Random) -> tuple[str, int]:
    """A Coq-like goal: equations over booleans are provable here, statements about lists with an IH are not."""
    v = rng.choice("abcxyz")
    if rng.random() < 0.5:
        return f"{v} : bool\n⊢ {v} && {rng.choice(['true', 'false', v])} = {v}", 1
    return f"{v} : list nat\nIH{v} : length {v} = {rng.randint(0, 9)}\n⊢ rev (app {v} nil) = {v}", 0


def test_auc_counts_ties_half_and_matches_a_hand_count():
    assert auc([0.1, 0.4, 0.35, 0.8], [0, 0, 1, 1]) == pytest.approx(0.75)
    assert auc([0.5, 0.5, 0.5], [1, 0, 0]) == pytest.approx(0.5)
    assert auc([0.9, 0.1], [1, 0]) == 1.0 and auc([0.1, 0.9], [1, 0]) == 0.0
    assert math.isnan(auc([0.3, 0.4], [1, 1]))  # one class: undefined


def test_an_untrained_critic_is_a_coin_flip_and_a_trained_one_ranks_held_out_goals():
    rng = random.Random(0)
    train = [_goal(rng) for _ in range(200)]
    held_out = [_goal(rng) for _ in range(100)]
    critic = GoalCritic()
    assert critic([Goal(t, "x") for t, _ in held_out]) == [0.5] * len(held_out)
    losses = fit_critic(critic, [t for t, _ in train], [float(y) for _, y in train], epochs=5)
    assert losses[-1] < losses[0] < math.log(2) + 0.05
    scores = critic([Goal(t, "x") for t, _ in held_out])
    assert auc(scores, [y for _, y in held_out]) > 0.95
    assert all(0.0 < s < 1.0 for s in scores)
    with pytest.raises(ValueError, match="labels"):
        fit_critic(critic, ["⊢ True"], [1.0, 0.0])


def test_the_same_data_and_seed_give_the_same_critic():
    rng = random.Random(1)
    data = [_goal(rng) for _ in range(50)]
    a, b = GoalCritic(), GoalCritic()
    for critic in (a, b):
        fit_critic(critic, [t for t, _ in data], [float(y) for _, y in data], epochs=2, seed=3)
    assert np.array_equal(a.weights, b.weights) and a.weights.any()

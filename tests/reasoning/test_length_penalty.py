"""The length penalty against hand-computed cases."""

import pytest

from aitp.reasoning.groups import length_penalty


def test_hand_computed_cases():
    # max 100 -> threshold 75; L=90: (90-75)/25 = 0.6 -> 1.0 * 0.4; L=75 unchanged; L>=100 -> 0
    assert length_penalty([1.0, 1.0, 1.0, 0.8], [90, 75, 120, 80], 100) == pytest.approx([0.4, 1.0, 0.0, 0.64])


def test_only_when_every_score_is_at_least_half():
    assert length_penalty([1.0, 0.49], [99, 99], 100) == [1.0, 0.49]
    assert length_penalty([0.5, 0.5], [99, 10], 100) == pytest.approx([0.5 * (1 - 24 / 25), 0.5])


def test_never_raises_a_score():
    import random

    rng = random.Random(0)
    for _ in range(2000):
        scores = [rng.choice([0.0, 0.5, 0.7, 1.0, rng.random()]) for _ in range(4)]
        lengths = [rng.randint(0, 300) for _ in range(4)]
        out = length_penalty(scores, lengths, 200)
        assert all(0.0 <= o <= s for o, s in zip(out, scores))

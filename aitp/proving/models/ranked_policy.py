"""The tactic policy of the learning prover: candidates, ranked per goal, capped per family, maybe sampled.

Any search can use it (it speaks `TacticPolicy.suggest`). A candidate's probability mixes the
ranker's softmax with the default order's (`mix`), so no tactic the ranker came to dislike ever
drops to zero; `temperature` flattens both. With `explore` set (train-split search), the order is
sampled without replacement from those probabilities (Gumbel top-k), so tactics outside the
greedy top-k are tried too, and new kinds of proofs can be found; evaluation leaves it off.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np

from aitp.proving.env import Goal
from aitp.proving.models.candidates import CandidateGenerator, cap_families
from aitp.proving.models.tactic_ranker import TacticRanker
from aitp.proving.search.base import TacticSuggestion


@dataclass(frozen=True)
class Exploration:
    """Sample the order of candidates instead of taking the best: Gumbel noise on log-probabilities."""

    temperature: float = 1.0  # scale of the noise: 0 is greedy, larger is wilder
    seed: int = 0  # with the goal's text, fixes the sample: reruns of an iteration search the same


def _log_softmax(x: np.ndarray) -> np.ndarray:
    top = x.max()
    return x - top - np.log(np.exp(x - top).sum())


class RankedTacticPolicy:
    """Suggests, per goal, the best `n` candidates after capping each family at `family_cap`."""

    def __init__(
        self,
        generator: CandidateGenerator,
        ranker: TacticRanker | None = None,
        family_cap: int = 1,
        temperature: float = 1.0,
        mix: float = 0.1,
        explore: Exploration | None = None,
    ) -> None:
        if temperature <= 0 or not 0.0 <= mix <= 1.0:
            raise ValueError(f"temperature must be > 0 and mix in [0, 1], got {temperature} and {mix}")
        self.generator = generator
        self.ranker = ranker or TacticRanker()
        self.family_cap = family_cap
        self.temperature = temperature
        self.mix = mix
        self.explore = explore

    def log_probs(self, goal: Goal, cands: list) -> np.ndarray:
        """Log-probability of each candidate: the ranker's softmax mixed with the default order's."""
        learned = _log_softmax(self.ranker.logits(goal.text, cands) / self.temperature)
        if self.mix == 0.0:
            return learned
        default = _log_softmax(self.ranker.default_logits(cands) / self.temperature)
        return np.logaddexp(np.log1p(-self.mix) + learned, np.log(self.mix) + default)

    def suggest(self, goals: list[Goal], n: int) -> list[list[TacticSuggestion]]:
        """For each goal, up to `n` tactics, best (or sampled) first, with their log-probabilities."""
        out = []
        for goal in goals:
            cands = self.generator.candidates(goal)
            if not cands:
                out.append([])
                continue
            logp = self.log_probs(goal, cands)
            keys = logp.copy()
            if self.explore is not None and self.explore.temperature > 0:
                rng = np.random.default_rng([self.explore.seed, zlib.crc32(goal.text.encode())])
                keys = keys + self.explore.temperature * rng.gumbel(size=len(keys))
            order = sorted(range(len(cands)), key=lambda i: (-keys[i], i))
            ranked = cap_families([cands[i] for i in order], self.family_cap)[:n]
            index = {c.tactic: i for i, c in enumerate(cands)}
            out.append([TacticSuggestion(c.tactic, float(logp[index[c.tactic]])) for c in ranked])
        return out

"""The learned goal critic: P(provable) of a goal from its text, the value HTPS backs up and BestFS breaks ties with.

Small enough to train in a second on a CPU, like the tactic ranker it sits beside: logistic regression over
the same hashed goal features (conclusion tokens and bigrams, hypothesis tokens and shapes) plus the goal's
size, so "a long goal with an induction hypothesis over lists" can be learned to be harder than "a short
equation of booleans". Trained by binary cross-entropy on the labels of `aitp.proving.data.critic_data`, it is
calibrated to how often such goals were proved, which is what HTPS's products of child values assume.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np
import torch

from aitp.proving.env import Goal
from aitp.proving.models.tactic_ranker import _TOKEN, fit_hashed_weights, goal_features


@dataclass(frozen=True)
class CriticConfig:
    """Shape of the critic's hashed feature space."""

    buckets: int = 1 << 16


def critic_features(text: str) -> list[str]:
    """What the critic sees of a goal: the ranker's goal features and the goal's size (tokens, hypotheses)."""
    size = len(_TOKEN.findall(text))
    return [*goal_features(text), f"len:{min(size // 8, 24)}", f"lines:{min(text.count(chr(10)), 12)}"]


def _ids(text: str, buckets: int) -> np.ndarray:
    return np.array([zlib.crc32(f.encode()) % buckets for f in critic_features(text)], dtype=np.int64)


class GoalCritic:
    """A goal's P(provable): sigmoid of the summed weights of its hashed features (mean-pooled, plus a bias)."""

    def __init__(self, config: CriticConfig | None = None, weights: np.ndarray | None = None) -> None:
        self.config = config or CriticConfig()
        n = self.config.buckets + 1  # the last weight is the bias
        self.weights = np.zeros(n, np.float32) if weights is None else np.asarray(weights, np.float32)
        if self.weights.shape != (n,):
            raise ValueError(f"critic weights of shape {self.weights.shape} do not match {self.config.buckets} buckets")

    def logits(self, texts: list[str]) -> np.ndarray:
        """The critic's log-odds of each goal text being provable."""
        b = self.config.buckets
        out = np.empty(len(texts))
        for i, text in enumerate(texts):
            ids = _ids(text, b)
            out[i] = self.weights[ids].mean() * np.sqrt(len(ids)) + self.weights[b]
        return out

    def values(self, texts: list[str]) -> np.ndarray:
        """P(provable) of each goal text."""
        return 1.0 / (1.0 + np.exp(-self.logits(texts)))

    def __call__(self, goals: list[Goal]) -> list[float]:
        """The search's `Critic` protocol: one value in (0, 1) per goal."""
        return [float(v) for v in self.values([g.text for g in goals])]


def fit_critic(
    critic: GoalCritic,
    texts: list[str],
    labels: list[float],
    epochs: int = 20,
    lr: float = 0.05,
    l2: float = 1e-4,
    batch: int = 64,
    seed: int = 0,
) -> list[float]:
    """Fit the critic by binary cross-entropy of the labels (1 proved, 0 unproved); the mean loss of each epoch."""
    if len(texts) != len(labels):
        raise ValueError(f"{len(texts)} goals but {len(labels)} labels")
    if not texts:
        return []
    b = critic.config.buckets
    rows = [_ids(t, b) for t in texts]
    y = torch.tensor(labels, dtype=torch.float32)

    def batch_loss(weight: torch.Tensor, chunk: list[int]) -> torch.Tensor:
        ids = torch.from_numpy(np.concatenate([rows[i] for i in chunk]))
        offsets = torch.tensor(np.cumsum([0] + [len(rows[i]) for i in chunk[:-1]]), dtype=torch.long)
        scale = torch.tensor([np.sqrt(len(rows[i])) for i in chunk], dtype=torch.float32)
        pooled = torch.nn.functional.embedding_bag(ids, weight[:b, None], offsets, mode="mean").squeeze(1)
        return torch.nn.functional.binary_cross_entropy_with_logits(pooled * scale + weight[b], y[torch.tensor(chunk)])

    critic.weights, history = fit_hashed_weights(critic.weights, len(rows), batch_loss, epochs, lr, l2, batch, seed)
    return history


def auc(scores: list[float] | np.ndarray, labels: list[float] | np.ndarray) -> float:
    """Area under the ROC curve (ties count half): P(a proved goal outranks an unproved one)."""
    s, y = np.asarray(scores, float), np.asarray(labels, float)
    pos, neg = s[y > 0.5], s[y <= 0.5]
    if not len(pos) or not len(neg):
        return float("nan")
    _, inverse, counts = np.unique(np.concatenate([pos, neg]), return_inverse=True, return_counts=True)
    ends = np.cumsum(counts)
    ranks = ((ends - counts + 1 + ends) / 2.0)[inverse]  # tied scores share their average rank
    return float((ranks[: len(pos)].sum() - len(pos) * (len(pos) + 1) / 2.0) / (len(pos) * len(neg)))

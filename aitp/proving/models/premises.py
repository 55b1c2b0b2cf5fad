"""Premise ranking, as HOList does it: score (goal, premise) pairs and keep the best premises.

The score is a TF-IDF cosine between goal and premise statement (works untrained) plus a learned
two-tower term: hashed bag-of-tokens embeddings of goal and premise, trained so that the
premises a human proof used outrank the other premises of the same batch. The premise tower
starts at zero, so an untrained scorer is exactly the TF-IDF ranking.
"""

from __future__ import annotations

import math
import re
import zlib
from collections import Counter
from pathlib import Path

import numpy as np
import torch
from torch import nn

_TOKEN = re.compile(r"[A-Za-z_][A-Za-z0-9_']*|[^\sA-Za-z0-9_]")


def tokens(text: str) -> list[str]:
    """Identifiers and symbols of a statement."""
    return _TOKEN.findall(text)


def short_name(name: str) -> str:
    """The last component of a qualified name."""
    return name.rsplit(".", 1)[-1]


class PremiseScorer(nn.Module):
    """TF-IDF overlap plus a learned dot product between hashed goal and premise embeddings."""

    def __init__(self, statements: dict[str, str], dim: int = 64, buckets: int = 1 << 14, seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.statements = statements
        self.buckets = buckets
        df = Counter(t for s in statements.values() for t in set(tokens(s)))
        n = max(len(statements), 1)
        self.idf = {t: math.log((1 + n) / (1 + c)) + 1.0 for t, c in df.items()}
        self.goal_tower = nn.EmbeddingBag(buckets, dim, mode="mean")
        self.premise_tower = nn.EmbeddingBag(buckets, dim, mode="mean")
        nn.init.zeros_(self.premise_tower.weight)
        self._tfidf: dict[str, dict[str, float]] = {}
        self._premise_ids: dict[str, list[int]] = {}
        self._premise_cache: tuple[tuple, np.ndarray] | None = None
        self._overlap_cache: tuple[tuple[str, ...], dict[str, tuple[np.ndarray, np.ndarray]]] | None = None

    def _vector(self, text: str) -> dict[str, float]:
        counts = Counter(tokens(text))
        vec = {t: c * self.idf.get(t, 1.0) for t, c in counts.items()}
        norm = math.sqrt(sum(v * v for v in vec.values())) or 1.0
        return {t: v / norm for t, v in vec.items()}

    def _premise_vector(self, name: str) -> dict[str, float]:
        if name not in self._tfidf:
            self._tfidf[name] = self._vector(self.statements.get(name, short_name(name)))
        return self._tfidf[name]

    def _token_ids(self, text: str) -> list[int]:
        return [zlib.crc32(t.encode()) % self.buckets for t in tokens(text) or ["<empty>"]]

    def _ids(self, texts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
        ids, offsets = [], []
        for text in texts:
            offsets.append(len(ids))
            ids.extend(self._token_ids(text))
        return torch.tensor(ids, dtype=torch.long), torch.tensor(offsets, dtype=torch.long)

    # Scoring runs in numpy: its arrays are tiny, and torch's intra-op threads, contending with the
    # prover for the same cores, made each call many times slower (benchmarks/results/history-prove.md).
    def _overlap(self, goal: dict[str, float], names: list[str]) -> np.ndarray:
        """TF-IDF cosine of the goal with each premise: for each token the goal has, the premises that
        share it (an inverted index over the premise list, built once per list) gain the product of
        their weights, so a library prefix of thousands of premises stays cheap to score."""
        key = tuple(names)
        if self._overlap_cache is None or self._overlap_cache[0] != key:
            postings: dict[str, tuple[list[int], list[float]]] = {}
            for row, name in enumerate(names):
                for token, weight in self._premise_vector(name).items():
                    rows, weights = postings.setdefault(token, ([], []))
                    rows.append(row)
                    weights.append(weight)
            index = {t: (np.array(r), np.array(w)) for t, (r, w) in postings.items()}
            self._overlap_cache = (key, index)
        _, index = self._overlap_cache
        out = np.zeros(len(names))
        for token, weight in goal.items():
            if token in index:
                rows, weights = index[token]
                out[rows] += weight * weights
        return out

    def _premise_embeddings(self, names: list[str]) -> np.ndarray:
        """Premise-tower embeddings (bag means) of `names`, reused while the tower's weights stay the same.

        A policy scores every goal of a theorem against the same premise list. In-place updates
        (optimizer steps, `load_state_dict`) bump the weight's version counter, which invalidates this.
        """
        weight = self.premise_tower.weight
        key = (id(weight), weight._version, tuple(names))
        if self._premise_cache is None or self._premise_cache[0] != key:
            ids, offsets = [], []
            for name in names:
                if name not in self._premise_ids:
                    self._premise_ids[name] = self._token_ids(self.statements.get(name, short_name(name)))
                offsets.append(len(ids))
                ids.extend(self._premise_ids[name])
            sums = np.add.reduceat(weight.detach().numpy()[ids], offsets, axis=0)
            self._premise_cache = (key, sums / np.diff([*offsets, len(ids)])[:, None])
        return self._premise_cache[1]

    def _learned(self, goals: list[str], premises: list[str]) -> torch.Tensor:
        g = self.goal_tower(*self._ids(goals))
        p = self.premise_tower(*self._ids([self.statements.get(n, short_name(n)) for n in premises]))
        return g @ p.T

    def score(self, goal_text: str, names: list[str]) -> list[float]:
        """One score per premise name (higher is more useful for this goal)."""
        if not names:
            return []
        overlap = self._overlap(self._vector(goal_text), names)
        goal = self.goal_tower.weight.detach().numpy()[self._token_ids(goal_text)].mean(axis=0)
        return (overlap + self._premise_embeddings(names) @ goal).tolist()

    def fit(self, examples: list[tuple[str, list[str]]], epochs: int = 5, batch: int = 64, lr: float = 0.05) -> float:
        """Train on (goal statement, premises its human proof used); returns the last epoch's mean loss."""
        pairs = [(goal, p) for goal, used in examples for p in used if p in self.statements]
        if not pairs:
            return 0.0
        opt = torch.optim.Adam(self.parameters(), lr=lr)
        gen = torch.Generator().manual_seed(0)
        mean = 0.0
        for _ in range(epochs):
            order = torch.randperm(len(pairs), generator=gen).tolist()
            losses = []
            for i in range(0, len(order), batch):
                chunk = [pairs[j] for j in order[i : i + batch]]
                logits = self._learned([g for g, _ in chunk], [p for _, p in chunk])
                loss = nn.functional.cross_entropy(logits, torch.arange(len(chunk)))
                opt.zero_grad()
                loss.backward()
                opt.step()
                losses.append(loss.item())
            mean = sum(losses) / len(losses)
        return mean

    def save(self, path: Path) -> None:
        """Save the learned weights."""
        torch.save(self.state_dict(), path)

    def load(self, path: Path) -> PremiseScorer:
        """Load weights saved by `save`."""
        self.load_state_dict(torch.load(path, weights_only=True))
        return self


def used_premises(proof: str, candidates: list[str]) -> list[str]:
    """Premises (by qualified or short name) that a human proof mentions."""
    words = set(tokens(proof))
    words |= {short_name(w) for w in re.findall(r"[A-Za-z_][\w'.]*", proof)}
    return [n for n in candidates if n in words or short_name(n) in words]

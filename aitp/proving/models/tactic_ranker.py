"""The goal-conditioned tactic ranker: a goal's text and a candidate tactic in, a score out.

HOList-style, small enough to train in seconds on a CPU: a linear model over hashed features,
where each feature of the tactic (its family, its argument's type or shape, the argument's
position) is also crossed with each feature of the goal (conclusion tokens and bigrams,
hypothesis tokens and shapes). So `induction:var` can learn to like goals whose conclusion is an
equation over lists, and `rewrite:hyp` to like goals holding an induction hypothesis — what one
score per tactic name could never say.

The learned term is added to the default order's logit and bounded (`bound * tanh(x / bound)`),
so training can reorder the candidates but never push a tactic more than `bound` nats away from
where the default order put it: a prior that cannot collapse. An untrained ranker (all weights
zero) is exactly the default order.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from aitp.proving.models.candidates import Candidate, split_goal, statement_shape

_TOKEN = re.compile(r"[A-Za-z_][A-Za-z0-9_']*|[^\sA-Za-z0-9_]+|[0-9]+")
_MIX = np.uint64(0x9E3779B97F4A7C15)


@dataclass(frozen=True)
class RankerConfig:
    """Shape of the ranker and of its default order."""

    buckets: int = 1 << 18
    bound: float = 3.0  # most nats the learned term may move a candidate
    order_step: float = 0.05  # default order: each later template loses this much logit
    arg_step: float = 0.01  # and each later argument of one template this much
    premise_weight: float = 0.2  # weight of the premise ranker's score in the default logit


def goal_features(text: str) -> list[str]:
    """What the ranker sees of a goal: conclusion tokens and bigrams, hypothesis tokens and shapes."""
    hyps, concl = split_goal(text)
    ctoks = _TOKEN.findall(concl)
    feats = {"bias", f"c0:{ctoks[0] if ctoks else ''}", f"nh:{min(len(hyps), 4)}"}
    feats.update(f"c:{t}" for t in ctoks)
    feats.update(f"c2:{a} {b}" for a, b in zip(ctoks, ctoks[1:]))
    feats.add(f"cs:{statement_shape(concl)}")
    for name, typ in hyps:
        feats.update(f"h:{t}" for t in _TOKEN.findall(typ))
        feats.add(f"hs:{statement_shape(typ)}")
        if name.startswith("IH"):
            feats.add("ih")
    return sorted(feats)


def tactic_keys(cand: Candidate, concl_tokens: frozenset[str]) -> list[str]:
    """What the ranker sees of a candidate: family, head, argument type/shape/name, argument position."""
    keys = [f"F:{cand.family}", f"H:{cand.head}"]
    if cand.kind != "none":
        keys.append(f"A:{cand.family}|{cand.arg_info}")
        keys.append(f"I:{cand.family}|{min(cand.arg_index, 3)}")
    if cand.kind == "var":
        keys.append(f"V:{cand.family}|{'in' if cand.argument in concl_tokens else 'out'}")
    return keys


def _hash(strings: list[str]) -> np.ndarray:
    return np.array([zlib.crc32(s.encode()) for s in strings], dtype=np.uint64)


def feature_ids(goal_text: str, cands: list[Candidate], buckets: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Hashed feature ids of every candidate, concatenated; their weights; each candidate's offset into them.

    A tactic key alone weighs 1; its crosses with the goal's features share a total weight of
    sqrt(n), so one example moves a candidate's score by about the same amount whatever the goal's size.
    """
    gfeats = goal_features(goal_text)
    g = _hash(gfeats)
    cross_weight = 1.0 / np.sqrt(len(g))
    concl_tokens = frozenset(_TOKEN.findall(split_goal(goal_text)[1]))
    ids, scales, offsets = [], [], []
    total = 0
    for cand in cands:
        t = _hash(tactic_keys(cand, concl_tokens))
        crossed = (g[None, :] * _MIX) ^ t[:, None]  # uint64 arithmetic wraps, as hashing wants
        row = np.concatenate([t, crossed.ravel() ^ np.uint64(0x5BD1E995)]) % np.uint64(buckets)
        offsets.append(total)
        ids.append(row.astype(np.int64))
        scales.append(np.concatenate([np.ones(len(t)), np.full(crossed.size, cross_weight)]))
        total += len(row)
    if not ids:
        return np.zeros(0, np.int64), np.zeros(0), np.array(offsets, dtype=np.int64)
    return np.concatenate(ids), np.concatenate(scales), np.array(offsets, dtype=np.int64)


class TacticRanker:
    """Scores candidates of a goal: the default order's logit plus a bounded, learned, goal-conditioned term."""

    def __init__(self, config: RankerConfig | None = None, weights: np.ndarray | None = None) -> None:
        self.config = config or RankerConfig()
        self.weights = np.zeros(self.config.buckets, np.float32) if weights is None else weights.astype(np.float32)
        if self.weights.shape != (self.config.buckets,):
            raise ValueError(f"weights of shape {self.weights.shape} do not match {self.config.buckets} buckets")

    @property
    def trained(self) -> bool:
        """Whether any weight moved from zero."""
        return bool(np.any(self.weights))

    def default_logits(self, cands: list[Candidate]) -> np.ndarray:
        """The default order as logits: template order, then argument order, plus the premise score."""
        c = self.config
        return np.array(
            [-c.order_step * x.rank - c.arg_step * x.arg_index + c.premise_weight * x.premise_score for x in cands]
        )

    def learned(self, goal_text: str, cands: list[Candidate]) -> np.ndarray:
        """The learned term of each candidate, before bounding."""
        if not cands or not self.trained:
            return np.zeros(len(cands))
        ids, scales, offsets = feature_ids(goal_text, cands, self.config.buckets)
        return np.add.reduceat(self.weights[ids] * scales, offsets)

    def logits(self, goal_text: str, cands: list[Candidate]) -> np.ndarray:
        """One logit per candidate (higher: try it first)."""
        bound = self.config.bound
        return self.default_logits(cands) + bound * np.tanh(self.learned(goal_text, cands) / bound)


@dataclass(frozen=True)
class RankingExample:
    """A goal of a re-checked proof: its candidates, which one the proof used, which are not negatives."""

    goal_text: str
    candidates: list[Candidate]
    positive: int
    masked: frozenset[int] = frozenset()  # other tactics that also worked here: neither right nor wrong
    negatives: frozenset[int] = frozenset()  # tactics that errored here (preference pairs' rejected side)


def fit_ranker(
    ranker: TacticRanker,
    examples: list[RankingExample],
    epochs: int = 8,
    lr: float = 0.05,
    l2: float = 1e-5,
    batch: int = 32,
    seed: int = 0,
) -> list[float]:
    """Train the learned term by softmax cross-entropy of the proof's tactic among its goal's candidates.

    Returns the mean loss of each epoch. The default order stays inside the logits, so the model
    learns only how this goal differs from what the default order already gets right.
    """
    examples = [e for e in examples if len(e.candidates) > 1]
    if not examples:
        return []
    c = ranker.config
    featurized = []
    for ex in examples:
        ids, scales, offsets = feature_ids(ex.goal_text, ex.candidates, c.buckets)
        mask = np.zeros(len(ex.candidates), bool)
        mask[list(ex.masked - {ex.positive})] = True
        featurized.append((ids, offsets, ranker.default_logits(ex.candidates), mask, ex.positive, scales))

    def batch_loss(weight: torch.Tensor, chunk: list[int]) -> torch.Tensor:
        return _batch_loss(weight, [featurized[i] for i in chunk], c.bound)

    ranker.weights, history = fit_hashed_weights(
        ranker.weights, len(featurized), batch_loss, epochs, lr, l2, batch, seed
    )
    return history


def fit_hashed_weights(
    weights: np.ndarray,
    n_examples: int,
    batch_loss: Callable[[torch.Tensor, list[int]], torch.Tensor],
    epochs: int,
    lr: float,
    l2: float,
    batch: int,
    seed: int,
) -> tuple[np.ndarray, list[float]]:
    """Minibatch Adam with an L2 penalty on one hashed weight vector (the ranker's, the critic's): the fitted
    weights and each epoch's mean loss. `batch_loss(weight, example indices)` is the model's loss on a batch."""
    weight = torch.nn.Parameter(torch.from_numpy(weights.copy()))
    opt = torch.optim.Adam([weight], lr=lr)
    gen = np.random.default_rng(seed)
    history = []
    for _ in range(epochs):
        order = gen.permutation(n_examples)
        losses = []
        for start in range(0, len(order), batch):
            loss = batch_loss(weight, list(order[start : start + batch])) + l2 * weight.pow(2).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        history.append(sum(losses) / len(losses))
    return weight.detach().numpy().astype(np.float32), history


def _batch_loss(weight: torch.Tensor, chunk: list, bound: float) -> torch.Tensor:
    ids = torch.from_numpy(np.concatenate([f[0] for f in chunk]))
    offsets, width, base = [], max(len(f[1]) for f in chunk), 0
    for f in chunk:
        offsets.append(f[1] + base)
        base += len(f[0])
    scales = torch.from_numpy(np.concatenate([f[5] for f in chunk])).float()
    learned = torch.nn.functional.embedding_bag(
        ids, weight[:, None], torch.from_numpy(np.concatenate(offsets)), mode="sum", per_sample_weights=scales
    ).squeeze(1)
    logits = torch.full((len(chunk), width), -1e9, dtype=torch.float64)
    rows, cols, defaults = [], [], []
    for r, f in enumerate(chunk):
        n = len(f[1])
        rows.extend([r] * n)
        cols.extend(range(n))
        defaults.append(np.where(f[3], -1e9, f[2]))
    default = torch.from_numpy(np.concatenate(defaults))
    value = default + bound * torch.tanh(learned.double() / bound)
    logits = logits.index_put((torch.tensor(rows), torch.tensor(cols)), value)
    target = torch.tensor([f[4] for f in chunk])
    return torch.nn.functional.cross_entropy(logits, target)

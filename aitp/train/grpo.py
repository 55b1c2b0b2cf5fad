"""Group-relative policy gradient (the GRPO family): advantages from a group's scores, the clipped surrogate.

A group is the `group_size` samples the policy drew for one item. Each sample's advantage is its score
minus the group's mean (Dr. GRPO), optionally divided by the group's standard deviation (GRPO); a group
whose scores are all equal has no signal and is skipped unless kept on purpose. The loss is PPO's
clipped surrogate per completion token, the probability ratio taken against the log-probs the SAMPLER
recorded for its own tokens at rollout time, so the trainer needs no second pass to recover them, and
averaged over the batch's completion tokens. `logprob_gap` measures how far the trainer's own forward pass
is from the sampler's on the same tokens: ~0 in fp32 on the CPU, a known gap in bf16 (or another engine).
Imports torch only, so it runs on a bare GPU machine.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

UNIFORM_SPREAD = 1e-9
"""Scores closer than this are equal: such a group has no advantage to learn from."""


def group_advantages(
    scores: Sequence[float], scale_std: bool = False, keep_uniform: bool = False
) -> list[float] | None:
    """Each sample's score minus its group's mean (over the std with `scale_std`); None: a skipped uniform group."""
    mean = sum(scores) / len(scores)
    std = math.sqrt(sum((s - mean) ** 2 for s in scores) / len(scores))  # the group's own spread (population)
    if std < UNIFORM_SPREAD:
        return [0.0] * len(scores) if keep_uniform else None
    return [(s - mean) / std if scale_std else s - mean for s in scores]


def clipped_surrogate(
    logp: Tensor,
    sampled_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    clip_eps: float,
    reference_logp: Tensor | None = None,
    kl_beta: float = 0.0,
) -> Tensor:
    """PPO's clipped surrogate per token, minus `kl_beta` x KL to the reference, as a loss averaged over `mask`.

    `logp`, `sampled_logp`, `reference_logp` and `mask` are (B, T) per token; `advantages` is (B,), one per
    sequence. Past the clip (ratio above 1 + eps with a positive advantage, below 1 - eps with a negative
    one) a token's gradient is zero: the step cannot move the policy further from the sampler on it.
    """
    weights = mask.to(logp.dtype)
    ratio = torch.exp(logp - sampled_logp.to(logp.dtype))
    adv = advantages.to(logp.dtype)[:, None]
    surrogate = torch.minimum(ratio * adv, ratio.clamp(1.0 - clip_eps, 1.0 + clip_eps) * adv)
    per_token = -surrogate
    if kl_beta and reference_logp is not None:
        # k3 estimator of KL(policy || reference): unbiased, never negative, exact gradient at equality.
        delta = reference_logp.to(logp.dtype) - logp
        per_token = per_token + kl_beta * (torch.exp(delta) - delta - 1.0)
    return (per_token * weights).sum() / weights.sum().clamp(min=1.0)


def logprob_gap(recorded: Tensor, recomputed: Tensor, mask: Tensor) -> tuple[float, int]:
    """Mean absolute difference of two log-prob tensors over `mask`, and the number of tokens it covers."""
    weights = mask.to(torch.float64)
    diff = (recorded.double() - recomputed.double()).abs() * weights
    tokens = int(weights.sum())
    return (float(diff.sum()) / tokens if tokens else float("nan")), tokens


def aligned(prompt_len: int, values: Sequence[float]) -> list[float]:
    """Per-token values of a completion at the positions of a prompt-then-completion sequence (0 on the prompt)."""
    return [0.0] * prompt_len + [float(v) for v in values]

"""Group-relative policy gradient (the GRPO family): advantages from a group's scores, the clipped surrogate.

A group is the `group_size` samples the policy drew for one item. Each sample's advantage is its score
minus the group's mean (Dr. GRPO), optionally divided by the group's standard deviation (GRPO); a group
whose scores are all equal has no signal and is skipped unless kept on purpose. The loss is PPO's
clipped surrogate per completion token, the probability ratio taken against the log-probs the SAMPLER
recorded for its own tokens at rollout time, so the trainer needs no second pass to recover them, and
averaged in one of the four ways users choose between (`LOSS_TYPES`). Every sample is trained on once per
epoch, in an order planned up front (`planned_order`), so each step's token count is known before its first
micro-batch runs (dapo divides by it). `logprob_gap` measures how far the trainer's own forward pass is from
the sampler's on the same tokens: ~0 in fp32 on the CPU, a known gap in bf16 (or another engine).
Imports torch only, so it runs on a bare GPU machine.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

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


LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo")
"""How the token losses of a batch are averaged, as TRL names them (see `TrainConfig.grpo_loss`)."""


@dataclass(frozen=True)
class Surrogate:
    """The settings of the clipped surrogate: its averaging, the clip range around 1, the KL weight."""

    loss: str = "grpo"
    clip_low: float = 0.2
    clip_high: float = 0.2
    kl_beta: float = 0.0

    def __post_init__(self) -> None:
        if self.loss not in LOSS_TYPES:
            raise ValueError(f"unknown grpo loss '{self.loss}': use one of {', '.join(LOSS_TYPES)}")

    @property
    def fixed_denominator(self) -> bool:
        """Whether the loss divides by a count the caller supplies (dr_grpo, dapo) instead of the batch's own."""
        return self.loss in ("dr_grpo", "dapo")


def clipped_surrogate(
    logp: Tensor,
    sampled_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    surrogate: Surrogate,
    reference_logp: Tensor | None = None,
    denominator: float | Tensor | None = None,
) -> Tensor:
    """PPO's clipped surrogate per token, minus `kl_beta` x KL to the reference, averaged as `surrogate.loss` says.

    `logp`, `sampled_logp`, `reference_logp` and `mask` are (B, T) per token; `advantages` is (B,), one per
    sequence. Past the clip (ratio above 1 + clip_high with a positive advantage, below 1 - clip_low with a
    negative one) a token's gradient is zero: the step cannot move the policy further from the sampler on it.
    dr_grpo and dapo divide the summed token losses by `denominator` (rows x longest completion; the optimizer
    step's tokens), which only the caller knows.
    """
    weights = mask.to(logp.dtype)
    ratio = torch.exp(logp - sampled_logp.to(logp.dtype))
    adv = advantages.to(logp.dtype)[:, None]
    clipped = ratio.clamp(1.0 - surrogate.clip_low, 1.0 + surrogate.clip_high)
    per_token = -torch.minimum(ratio * adv, clipped * adv)
    if surrogate.kl_beta and reference_logp is not None:
        # k3 estimator of KL(policy || reference): unbiased, never negative, exact gradient at equality.
        delta = reference_logp.to(logp.dtype) - logp
        per_token = per_token + surrogate.kl_beta * (torch.exp(delta) - delta - 1.0)
    per_token = per_token * weights
    if surrogate.loss == "grpo":
        lengths = weights.sum(dim=1)
        rows = lengths > 0
        return (per_token.sum(dim=1)[rows] / lengths[rows]).sum() / rows.sum().clamp(min=1)
    if surrogate.loss == "bnpo":
        return per_token.sum() / weights.sum().clamp(min=1.0)
    if denominator is None:
        raise ValueError(f"grpo loss {surrogate.loss} divides by a count of the step: pass its denominator")
    return per_token.sum() / denominator


def planned_order(samples: int, epochs: int, seed: int) -> list[int]:
    """The samples' indices, each epoch a fresh permutation drawn from `seed`: every sample once per epoch."""
    generator = torch.Generator().manual_seed(seed)
    return [int(i) for _ in range(epochs) for i in torch.randperm(samples, generator=generator)]


def step_tokens(order: Sequence[int], tokens: Sequence[int], rows_per_step: int) -> list[int]:
    """For each position of `order`, the completion tokens of the optimizer step it falls in.

    A step takes `rows_per_step` consecutive positions (micro-batch x accumulation x devices): a device's
    sampler deals the positions out in turn, so the step's rows on all devices are one contiguous block.
    """
    out: list[int] = []
    for start in range(0, len(order), rows_per_step):
        block = order[start : start + rows_per_step]
        out += [sum(tokens[i] for i in block)] * len(block)
    return out


def logprob_gap(recorded: Tensor, recomputed: Tensor, mask: Tensor) -> tuple[float, int]:
    """Mean absolute difference of two log-prob tensors over `mask`, and the number of tokens it covers."""
    weights = mask.to(torch.float64)
    diff = (recorded.double() - recomputed.double()).abs() * weights
    tokens = int(weights.sum())
    return (float(diff.sum()) / tokens if tokens else float("nan")), tokens


def aligned(prompt_len: int, values: Sequence[float]) -> list[float]:
    """Per-token values of a completion at the positions of a prompt-then-completion sequence (0 on the prompt)."""
    return [0.0] * prompt_len + [float(v) for v in values]

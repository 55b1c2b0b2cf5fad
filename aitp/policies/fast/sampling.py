"""Picking tokens on the GPU without a pass over a float64 cumulative sum of the whole vocabulary.

The eager sampler (`aitp.policies.tiny.sampler.pick_tokens`) inverts the cumulative distribution
of the tempered softmax at the row's uniform; so does this, in two levels: the uniform picks a
block of `BLOCK` tokens from the blocks' total masses, then a token within that block. The chosen
token is the same as a flat inversion would give (up to float rounding at block edges) and costs
a few reads of the logits, which a compiler can fuse. Nucleus sampling (top_p < 1) needs the
sorted distribution and goes to `pick_tokens` itself.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from aitp.policies.tiny.sampler import pick_tokens

BLOCK = 256


def pick(logits: Tensor, temperature: float, top_p: float, u: Tensor) -> tuple[Tensor, Tensor]:
    """Tokens (greedy at temperature 0, else inverse CDF at `u`) and their untempered log-probs."""
    if top_p < 1.0:
        return pick_tokens(logits, temperature, top_p, u)
    x = logits.float()
    lse = torch.logsumexp(x, dim=-1)
    if temperature <= 0:
        tokens = x.argmax(dim=-1)
    else:
        tokens = _invert(x / temperature if temperature != 1.0 else x, u)
    return tokens, x.gather(-1, tokens[:, None])[:, 0] - lse


def _invert(z: Tensor, u: Tensor) -> Tensor:
    rows, vocab = z.shape
    pad = -vocab % BLOCK
    mass = torch.exp(z - z.amax(dim=-1, keepdim=True))
    if pad:
        mass = F.pad(mass, (0, pad))
    blocks = mass.view(rows, -1, BLOCK)
    cum = blocks.sum(-1).double().cumsum(-1)
    target = u.to(cum.device, torch.float64) * cum[:, -1]
    # Rounding can put the target past the last block or token with mass: clamp to the last such.
    last_block = (cum < cum[:, -1:]).sum(-1, keepdim=True)
    block = torch.minimum(torch.searchsorted(cum, target[:, None], right=True), last_block)
    before = torch.where(block > 0, cum.gather(-1, (block - 1).clamp(min=0)), torch.zeros_like(target[:, None]))
    inner = blocks.gather(1, block[:, :, None].expand(-1, -1, BLOCK))[:, 0].double().cumsum(-1)
    last = (inner < inner[:, -1:]).sum(-1, keepdim=True)
    within = torch.minimum(torch.searchsorted(inner, target[:, None] - before, right=True), last)
    return (block * BLOCK + within)[:, 0].clamp(max=vocab - 1)

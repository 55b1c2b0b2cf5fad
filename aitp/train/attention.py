"""Causal attention without a materialised mask for training Hugging Face models, compiled or not.

The trainer's GPU forward passes no padding mask (sequences are right-padded, so causal attention alone is
exact for every token that counts). A Llama-family model then still builds an explicit causal mask whenever it
runs under torch.compile with torch older than 2.14 (transformers cannot tell, while tracing, that the mask
could be skipped), and SDPA given a mask computes the whole square instead of the causal half, with slower
kernels (what that costs a compiled step: `benchmarks/results/2026-11-29-train-profile.md`). Under the
implementation registered here the mask is never built and SDPA runs with `is_causal`, the same arithmetic.
"""

from __future__ import annotations

from torch import nn

CAUSAL_SDPA = "aitp_causal_sdpa"
"""The attention implementation's name in transformers' registries."""


def _no_mask(*args, **kwargs) -> None:
    return None


def use_causal_sdpa(model: nn.Module) -> str | None:
    """Switch `model` to SDPA attention with no mask (causal only); returns the implementation it had, or None
    when the model is not a transformers model on SDPA (left as it is)."""
    config = getattr(model, "config", None)
    before = getattr(config, "_attn_implementation", None)
    if before != "sdpa":
        return None
    from transformers import AttentionInterface, AttentionMaskInterface
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    AttentionInterface.register(CAUSAL_SDPA, ALL_ATTENTION_FUNCTIONS["sdpa"])
    AttentionMaskInterface.register(CAUSAL_SDPA, _no_mask)
    model.set_attn_implementation(CAUSAL_SDPA)
    return before

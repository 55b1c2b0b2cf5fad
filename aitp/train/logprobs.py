"""Token log-probabilities and the sft loss of a policy, with the GPU's fused language-model head.

On CUDA a Hugging Face policy with a plain output layer (logits = hidden @ W^T) takes its sft loss from
`linear_nll`: the head and its cross-entropy run a few thousand positions at a time, and each chunk's
gradient (softmax minus the one-hot target, times the position's weight) is formed at once, so the full
logits never exist. At a vocabulary of 49,152 those are 3.2 GB in bf16 at 64 x 512 tokens, and twice that
once cast to fp32 for the loss: written, read back for the loss and again for its gradient. The CPU keeps
the plain head and its exact arithmetic. No key/value cache is built: nothing reads it here, and a cache
handed to every layer would make a network compiled block by block recompile for each layer.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

CHUNK_TOKENS = 8192
"""Positions per chunk of the fused head: 8192 x 49,152 logits are 0.8 GB in bf16, one chunk at a time."""

PLAIN_HEAD_MODELS = frozenset({"llama", "mistral", "qwen2", "qwen3"})
"""Architectures whose logits are exactly the output layer applied to the decoder's last hidden state (no soft
capping or scaling): the fused head computes the same loss for them."""


def token_logprobs(
    model: nn.Module, backend: str, input_ids: Tensor, attention_mask: Tensor, fast: bool | None = None
) -> Tensor:
    """log p(token t | tokens < t) for t >= 1, shape (B, T - 1); `fast` (default: on CUDA) takes the GPU path."""
    if backend == "tiny":
        return model.token_logprobs(input_ids)  # right padding never precedes a real token
    if not (input_ids.is_cuda if fast is None else fast):  # the CPU keeps its exact arithmetic
        mask = attention_mask[:, :-1].long()
        logits = model(input_ids=input_ids[:, :-1], attention_mask=mask, use_cache=False).logits
        return -F.cross_entropy(logits.float().transpose(1, 2), input_ids[:, 1:], reduction="none")
    # No mask: rows are right-padded, so causal attention alone gives every real token the same context, and
    # SDPA takes its flash kernel (a mask forces a slower one). The loss reads the vocabulary contiguously.
    logits = model(input_ids=input_ids[:, :-1], use_cache=False).logits
    nll = F.cross_entropy(logits.float().flatten(0, 1), input_ids[:, 1:].flatten(), reduction="none")
    return -nll.view(input_ids.shape[0], -1)


def completion_logprobs(model: nn.Module, backend: str, batch: dict[str, Tensor]) -> Tensor:
    """Summed log-probs of each row's target tokens, shape (B,)."""
    logp = token_logprobs(model, backend, batch["input_ids"], batch["attention_mask"])
    return (logp * batch["target_mask"][:, 1:].to(logp.dtype)).sum(-1)


def sft_nll(
    model: nn.Module,
    backend: str,
    batch: dict[str, Tensor],
    fast: bool | None = None,
    head: Callable[[Tensor, Tensor, Tensor, Tensor], Tensor] | None = None,
) -> Tensor:
    """Mean negative log-likelihood over the batch's completion tokens; `fast` (default: on CUDA) fuses the head,
    computed by `head` (default `linear_nll`; a compiled one where the network around it is compiled by block)."""
    ids = batch["input_ids"]
    layers = plain_head(model) if backend == "hf" and (ids.is_cuda if fast is None else fast) else None
    if layers is None:
        logp = token_logprobs(model, backend, ids, batch["attention_mask"], fast)
        weights = batch["target_mask"][:, 1:].to(logp.dtype)
        return -(logp * weights).sum() / weights.sum().clamp(min=1.0)
    decoder, output = layers
    hidden = decoder(input_ids=ids[:, :-1], use_cache=False).last_hidden_state  # no mask: as in the GPU path above
    weights = batch["target_mask"][:, 1:].float()
    weights = weights / weights.sum().clamp(min=1.0)
    return (head or linear_nll)(hidden.flatten(0, 1), output.weight, ids[:, 1:].flatten(), weights.flatten())


def plain_head(model: nn.Module) -> tuple[nn.Module, nn.Linear] | None:
    """(decoder, output layer) of a causal LM whose logits are exactly hidden @ W^T, else None."""
    if getattr(getattr(model, "config", None), "model_type", None) not in PLAIN_HEAD_MODELS:
        return None
    output = model.get_output_embeddings()
    if not isinstance(output, nn.Linear) or output.bias is not None:
        return None
    return model.get_decoder(), output


def linear_nll(hidden: Tensor, weight: Tensor, targets: Tensor, weights: Tensor, chunk: int = CHUNK_TOKENS) -> Tensor:
    """sum_t weights[t] * -log softmax(hidden[t] @ weight^T)[targets[t]], with no more than `chunk` rows of logits."""
    return _LinearNLL.apply(hidden, weight, targets, weights, chunk)


class _LinearNLL(torch.autograd.Function):
    """The output layer and weighted cross-entropy in one: the gradients are formed chunk by chunk in forward
    (the weights are known there), so backward only scales them and nothing of logit size is kept."""

    @staticmethod
    def forward(ctx, hidden: Tensor, weight: Tensor, targets: Tensor, weights: Tensor, chunk: int) -> Tensor:
        grad_hidden = torch.empty_like(hidden)
        grad_weight = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device)
        total = torch.zeros((), dtype=torch.float32, device=hidden.device)
        vocab = torch.arange(weight.shape[0], device=weight.device)
        for start in range(0, hidden.shape[0], chunk):
            part = slice(start, start + chunk)
            rows, target, w = hidden[part], targets[part], weights[part]
            logits = rows @ weight.T  # bf16 under autocast, as the plain head computes it
            wide = logits.float()
            lse = wide.logsumexp(-1)
            picked = wide.gather(1, target[:, None]).squeeze(1)
            total = total + ((lse - picked) * w).sum()
            # d nll / d logits = softmax - one_hot(target), times the position's weight; in the matmul's dtype.
            grad = (torch.exp(wide - lse[:, None]) - (vocab[None, :] == target[:, None]).float()) * w[:, None]
            grad = grad.to(logits.dtype)
            grad_hidden[part] = grad @ weight
            grad_weight += (grad.T @ rows).float()
        ctx.save_for_backward(grad_hidden, grad_weight.to(weight.dtype))
        return total

    @staticmethod
    def backward(ctx, grad_output: Tensor):
        grad_hidden, grad_weight = ctx.saved_tensors
        return grad_hidden * grad_output, grad_weight * grad_output, None, None, None

"""The GPU's loss paths, checked on CPU: the unmasked head and the fused chunked head give the exact path's numbers."""

import pytest
import torch
import transformers

from aitp.train.logprobs import linear_nll, plain_head, sft_nll, token_logprobs
from aitp.train.module import pad_batch
from tests.policies.test_decoder import tiny_llama  # a 2-layer random Llama with grouped query heads


def _batch() -> dict[str, torch.Tensor]:
    rows = [[5, 9, 13, 2, 7, 30, 41, 3], [11, 4, 8], [17, 22, 6, 19, 1]]  # ragged: the shorter rows get padding
    return pad_batch([(r, [False] * 2 + [True] * (len(r) - 2)) for r in rows], pad_id=0)


def _tied_llama() -> transformers.LlamaForCausalLM:
    """SmolLM2's layout in miniature: the output layer is the embedding."""
    config = transformers.LlamaConfig(
        vocab_size=300, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, tie_word_embeddings=True,
    )  # fmt: skip
    torch.manual_seed(1)
    return transformers.LlamaForCausalLM(config)


def test_the_fast_path_gives_every_real_token_the_masked_log_prob():
    model, batch = tiny_llama(), _batch()
    with torch.no_grad():
        masked = token_logprobs(model, "hf", batch["input_ids"], batch["attention_mask"], fast=False)
        fast = token_logprobs(model, "hf", batch["input_ids"], batch["attention_mask"], fast=True)
    real = batch["attention_mask"][:, 1:]
    assert fast.shape == masked.shape
    torch.testing.assert_close(fast[real], masked[real], rtol=1e-5, atol=1e-5)
    assert not torch.allclose(fast[~real], masked[~real])  # padding positions differ: the mask really is dropped


@pytest.mark.parametrize("build", [tiny_llama, _tied_llama], ids=["separate-head", "tied-head"])
def test_the_fused_head_gives_the_exact_loss_and_gradients(build):
    batch = _batch()
    results = []
    for fast in (False, True):
        model = build().train()
        assert plain_head(model) is not None
        loss = sft_nll(model, "hf", batch, fast=fast)
        loss.backward()
        results.append((loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}))
    (exact, exact_grads), (fused, fused_grads) = results
    torch.testing.assert_close(fused, exact, rtol=1e-5, atol=1e-5)
    assert exact_grads.keys() == fused_grads.keys()
    for name, grad in exact_grads.items():
        torch.testing.assert_close(fused_grads[name], grad, rtol=1e-4, atol=1e-6, msg=name)


def test_chunks_change_nothing_and_weights_scale_each_position():
    torch.manual_seed(0)
    hidden, weight = torch.randn(10, 16, requires_grad=True), torch.randn(50, 16, requires_grad=True)
    targets, weights = torch.randint(0, 50, (10,)), torch.rand(10)
    reference = (torch.nn.functional.cross_entropy(hidden @ weight.T, targets, reduction="none") * weights).sum()
    expected = torch.autograd.grad(reference, (hidden, weight))
    for chunk in (3, 10, 64):  # uneven chunks, one exact chunk, one larger than the input
        loss = linear_nll(hidden, weight, targets, weights, chunk)
        got = torch.autograd.grad(2.0 * loss, (hidden, weight))  # an upstream factor reaches both gradients
        torch.testing.assert_close(loss, reference)
        torch.testing.assert_close(got[0], 2.0 * expected[0])
        torch.testing.assert_close(got[1], 2.0 * expected[1])


def test_a_head_that_is_not_plain_keeps_the_unfused_path():
    config = transformers.Gemma2Config(
        vocab_size=300, hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=1, head_dim=32,
    )  # fmt: skip
    assert config.final_logit_softcapping  # Gemma 2 caps its logits: hidden @ W^T alone would be a different loss
    assert plain_head(transformers.Gemma2ForCausalLM(config)) is None

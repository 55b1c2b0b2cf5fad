"""The training module's GPU path, checked on CPU: dropping the mask of right-padded rows changes no real token."""

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from aitp.train.module import PolicyModule, pad_batch, token_logprobs


def _llama() -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        attn_implementation="sdpa",
    )
    return LlamaForCausalLM(config).eval()


def _batch() -> dict[str, torch.Tensor]:
    rows = [[5, 9, 13, 2, 7, 30, 41, 3], [11, 4, 8], [17, 22, 6, 19, 1]]  # ragged: the shorter rows get padding
    return pad_batch([(r, [False] + [True] * (len(r) - 1)) for r in rows], pad_id=0)


def test_the_fast_path_gives_every_real_token_the_masked_log_prob():
    model, batch = _llama(), _batch()
    with torch.no_grad():
        masked = token_logprobs(model, "hf", batch["input_ids"], batch["attention_mask"], fast=False)
        fast = token_logprobs(model, "hf", batch["input_ids"], batch["attention_mask"], fast=True)
    real = batch["attention_mask"][:, 1:]
    assert fast.shape == masked.shape
    torch.testing.assert_close(fast[real], masked[real], rtol=1e-5, atol=1e-5)
    assert not torch.allclose(fast[~real], masked[~real])  # padding positions differ: the mask really is dropped


def test_the_optimizer_is_fused_on_cuda_only():
    module = PolicyModule(_llama(), "hf")
    optimizer = module.configure_optimizers()["optimizer"]
    assert not optimizer.defaults.get("fused")  # CPU parameters: the per-parameter loop, as before

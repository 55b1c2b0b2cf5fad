"""The training module's GPU path, checked on CPU: dropping the mask of right-padded rows changes no real token."""

import torch

from aitp.train.module import PolicyModule, pad_batch, token_logprobs
from tests.policies.test_decoder import tiny_llama  # a 2-layer random Llama with grouped query heads


def _batch() -> dict[str, torch.Tensor]:
    rows = [[5, 9, 13, 2, 7, 30, 41, 3], [11, 4, 8], [17, 22, 6, 19, 1]]  # ragged: the shorter rows get padding
    return pad_batch([(r, [False] + [True] * (len(r) - 1)) for r in rows], pad_id=0)


def test_the_fast_path_gives_every_real_token_the_masked_log_prob():
    model, batch = tiny_llama(), _batch()
    with torch.no_grad():
        masked = token_logprobs(model, "hf", batch["input_ids"], batch["attention_mask"], fast=False)
        fast = token_logprobs(model, "hf", batch["input_ids"], batch["attention_mask"], fast=True)
    real = batch["attention_mask"][:, 1:]
    assert fast.shape == masked.shape
    torch.testing.assert_close(fast[real], masked[real], rtol=1e-5, atol=1e-5)
    assert not torch.allclose(fast[~real], masked[~real])  # padding positions differ: the mask really is dropped


def test_the_optimizer_is_fused_on_cuda_only():
    module = PolicyModule(tiny_llama(), "hf")
    optimizer = module.configure_optimizers()["optimizer"]
    assert not optimizer.defaults.get("fused")  # CPU parameters: the per-parameter loop, as before

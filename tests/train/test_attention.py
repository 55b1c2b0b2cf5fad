"""Causal SDPA without a mask (the trainer's GPU path): the same numbers, compiled or not, and put back after a fit."""

from __future__ import annotations

import json

import pytest
import torch

from aitp.train.attention import CAUSAL_SDPA, use_causal_sdpa
from aitp.train.logprobs import sft_nll
from tests.train.test_logprobs import _batch, _tied_llama


def _loss_and_grads(model, compiled: bool):
    fn = torch.compile(sft_nll) if compiled else sft_nll
    loss = fn(model, "hf", _batch(), fast=True)  # the GPU path: no padding mask, the fused head
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}


# compiled: torch.compile on the CPU standing in for the GPU takes about a minute: run with -m slow
@pytest.mark.parametrize("compiled", [False, pytest.param(True, marks=pytest.mark.slow)], ids=["eager", "compiled"])
def test_causal_sdpa_gives_the_masked_models_loss_and_gradients(compiled, one_thread):
    expected_loss, expected = _loss_and_grads(_tied_llama().train(), compiled)
    model = _tied_llama().train()
    assert use_causal_sdpa(model) == "sdpa" and model.config._attn_implementation == CAUSAL_SDPA
    loss, grads = _loss_and_grads(model, compiled)
    torch.testing.assert_close(loss, expected_loss, rtol=1e-5, atol=1e-6)
    for name, grad in expected.items():
        torch.testing.assert_close(grads[name], grad, rtol=1e-4, atol=1e-6, msg=name)


def test_no_mask_is_built_under_causal_sdpa_even_compiled():
    from transformers.masking_utils import create_causal_mask

    model = _tied_llama()
    embeds, position = torch.zeros(2, 5, model.config.hidden_size), torch.arange(5).unsqueeze(0)
    use_causal_sdpa(model)
    # config, inputs, padding mask, cache, positions (by position: the cache's keyword was renamed in transformers 5)
    built = torch.compile(lambda e: create_causal_mask(model.config, e, None, None, position))(embeds)
    assert built is None  # plain sdpa builds a (2, 1, 5, 5) mask here under torch.compile before torch 2.14


def test_other_attention_is_left_alone_and_the_saved_config_names_none_of_ours(tmp_path):
    eager = _tied_llama()
    eager.set_attn_implementation("eager")
    assert use_causal_sdpa(eager) is None and eager.config._attn_implementation == "eager"
    model = _tied_llama()
    before = use_causal_sdpa(model)
    model.set_attn_implementation(before)  # what the trainer does when the fit ends, before saving
    model.save_pretrained(tmp_path)
    assert CAUSAL_SDPA not in (tmp_path / "config.json").read_text()
    assert json.loads((tmp_path / "config.json").read_text())["model_type"] == "llama"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_gpu_fit_trains_through_causal_sdpa_and_hands_the_model_back_on_sdpa():
    from torch.utils.data import DataLoader

    from aitp.train.module import PolicyModule, pl

    seen: list[str] = []

    class Watch(pl.Callback):
        def on_train_batch_start(self, trainer, module, batch, batch_idx) -> None:
            seen.append(module.model.config._attn_implementation)

    model = _tied_llama()
    trainer = pl.Trainer(
        accelerator="gpu", devices=1, max_steps=2, precision="bf16-mixed", callbacks=[Watch()], logger=False,
        enable_checkpointing=False, enable_progress_bar=False,
    )  # fmt: skip
    trainer.fit(PolicyModule(model, "hf", compile=True), DataLoader([_batch()], batch_size=None))
    assert seen == [CAUSAL_SDPA, CAUSAL_SDPA]
    assert model.config._attn_implementation == "sdpa"

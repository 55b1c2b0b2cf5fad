"""The training module's GPU choices, checked on CPU: the fused optimizer, the compile modes it takes."""

import pytest

from aitp.train.module import PolicyModule, TrainDataError
from tests.policies.test_decoder import tiny_llama  # a 2-layer random Llama with grouped query heads


def test_the_optimizer_is_fused_on_cuda_only():
    module = PolicyModule(tiny_llama(), "hf")
    optimizer = module.configure_optimizers()["optimizer"]
    assert not optimizer.defaults.get("fused")  # CPU parameters: the per-parameter loop, as before


def test_an_unknown_compile_mode_is_refused():
    assert PolicyModule(tiny_llama(), "hf", compile="reduce-overhead").compile == "reduce-overhead"
    with pytest.raises(TrainDataError, match="unknown compile mode 'fast'"):
        PolicyModule(tiny_llama(), "hf", compile="fast")


def test_the_config_offers_the_modes_the_module_takes():
    from typing import get_args

    from aitp.train.config import TrainConfig
    from aitp.train.module import COMPILE_MODES

    offered = {a for arg in get_args(TrainConfig.model_fields["compile"].annotation) for a in get_args(arg) or [arg]}
    assert offered - {bool} == set(COMPILE_MODES)


def test_repeated_blocks_are_the_longest_list_of_modules_of_one_class():
    import torch

    from aitp.policies.tiny import TinyConfig, TinyTransformer
    from aitp.train.module import repeated_blocks

    llama = tiny_llama()
    assert repeated_blocks(llama) == list(llama.model.layers) and len(llama.model.layers) == 2
    tiny = TinyTransformer(TinyConfig(n_layer=3, n_head=2, d_model=32, max_seq_len=16))
    assert repeated_blocks(PolicyModule(tiny, "tiny")) == list(tiny.blocks)  # found inside the Lightning module
    with pytest.raises(TrainDataError, match="Sequential has no list of repeated blocks"):
        repeated_blocks(torch.nn.Sequential(torch.nn.Linear(2, 2)))


@pytest.mark.slow  # torch.compile on the CPU standing in for the GPU: ~20 s of compiles
def test_compiling_by_block_traces_one_graph_for_every_block_and_computes_the_eager_loss():
    import torch
    import torch._dynamo.utils as dynamo_utils

    torch.manual_seed(0)
    ids = torch.randint(3, 200, (2, 12))
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "target_mask": torch.ones_like(ids)}
    eager = PolicyModule(tiny_llama(), "hf")._loss(batch)
    torch._dynamo.reset()
    dynamo_utils.counters.clear()
    module = PolicyModule(tiny_llama(), "hf", compile=True, compile_blocks=True)  # the same seeded weights
    loss = module._loss(batch)
    loss.backward()
    stats = dict(dynamo_utils.counters["stats"])
    assert stats.get("unique_graphs") == 1 and not dynamo_utils.counters["graph_break"], dict(dynamo_utils.counters)
    assert all(
        callable(getattr(block.forward, "_torchdynamo_orig_callable", None)) for block in module.model.model.layers
    )
    assert torch.allclose(loss, eager, rtol=1e-5), (float(loss), float(eager))


@pytest.mark.slow  # torch.compile on the CPU standing in for the GPU: ~20 s of compiles
def test_compiling_by_block_keeps_every_block_compiled_when_each_needs_its_own_graph(monkeypatch):
    """Under DeepSpeed a block's guards can hold its weights' ids (torch 2.11 on two H200s), so each block compiles
    its own graph, and past dynamo's limit for one code object (8) the later blocks would run eager. DeepSpeed is
    not installed here: each block carries an id of its own that its forward reads, which guards the same way."""
    import torch
    import torch._dynamo.utils as dynamo_utils

    from aitp.policies.tiny import TinyConfig, TinyTransformer
    from aitp.policies.tiny import model as tiny_model

    untagged = tiny_model.Block.forward

    def tagged(self, x, *args):
        return untagged(self, x + 0.0 * self.tag, *args)

    monkeypatch.setattr(tiny_model.Block, "forward", tagged)
    tiny = TinyTransformer(TinyConfig(n_layer=12, n_head=2, d_model=32, max_seq_len=16))
    for tag, block in enumerate(tiny.blocks):
        block.tag = tag
    torch._dynamo.reset()
    dynamo_utils.counters.clear()
    ids = torch.randint(3, 200, (2, 12))
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "target_mask": torch.ones_like(ids)}
    # dynamo's own patch: undone by monkeypatch, the setting was missing for the tests that followed
    with torch._dynamo.config.patch(recompile_limit=8):
        PolicyModule(tiny, "tiny", compile=True, compile_blocks=True)._loss(batch)
    assert dynamo_utils.counters["stats"]["unique_graphs"] == 12, dict(dynamo_utils.counters)


def test_compiling_by_block_compiles_the_fused_head_on_its_own_to_the_eager_loss_and_gradients():
    """The GPU's fused head, outside the blocks' graphs, is one graph of its own; here on the CPU (`fast`)."""
    import torch
    import torch._dynamo.utils as dynamo_utils

    from aitp.train.logprobs import linear_nll, sft_nll

    torch.manual_seed(0)
    ids = torch.randint(3, 200, (2, 12))
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "target_mask": torch.ones_like(ids)}
    model = tiny_llama()
    eager = sft_nll(model, "hf", batch, fast=True)
    eager.backward()
    expected = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    torch._dynamo.reset()
    dynamo_utils.counters.clear()
    module = PolicyModule(model, "hf", compile=True, compile_blocks=True)
    module._loss(batch)  # on the CPU the module takes the plain head; what it compiled is used below
    assert module._head is not linear_nll
    dynamo_utils.counters.clear()
    loss = sft_nll(model, "hf", batch, fast=True, head=module._head)
    loss.backward()
    assert dynamo_utils.counters["stats"]["unique_graphs"] == 1, dict(dynamo_utils.counters)
    assert not dynamo_utils.counters["graph_break"], dict(dynamo_utils.counters["graph_break"])
    assert torch.allclose(loss, eager, rtol=1e-5), (float(loss), float(eager))
    for p, g in zip(model.parameters(), expected):
        assert torch.allclose(p.grad, g, rtol=1e-4, atol=1e-6)

"""The training benchmark: its repeats alternate the strategies' order, each setting's medians are compared, the
architectures have their published parameter counts, and the plain-PyTorch reference step learns."""

from __future__ import annotations

import importlib.util
import itertools
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(REPO / "benchmarks"))  # train.py imports its siblings rollouts, plain_torch, model_sizes
    siblings = [name for name in ("rollouts", "plain_torch", "model_sizes") if name not in sys.modules]
    try:
        spec = importlib.util.spec_from_file_location("train_benchmark", REPO / "benchmarks" / "train.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
        for name in siblings:
            sys.modules.pop(name, None)


def test_repeats_alternate_which_strategy_runs_first(bench):
    orders = list(itertools.islice(bench.alternating(["single", "deepspeed"]), 4))
    assert orders == [["single", "deepspeed"], ["deepspeed", "single"]] * 2


def test_medians_compare_each_setting_s_strategies_over_their_repeats(bench):
    def row(strategy, batch, rate, repeat):
        setting = {"batch": batch, "compile": "off", "head": "fused", "attention": "default"}
        return {**setting, "strategy": strategy, "tokens_per_s": rate, "repeat": repeat}

    rows = [
        row("single (bf16-mixed)", 32, 60.0, 0),
        row("deepspeed ZeRO-2", 32, 40.0, 0),
        row("deepspeed ZeRO-2", 32, 50.0, 1),
        row("single (bf16-mixed)", 32, 50.0, 1),
        row("single (bf16-mixed)", 32, 55.0, 2),
        row("deepspeed ZeRO-2", 32, 44.0, 2),
        row("deepspeed ZeRO-2", 64, 70.0, 0),  # a setting plain did not run in
    ]
    got = {(m["batch"], m["strategy"]): m for m in bench.medians(rows)}
    assert got[(32, "single (bf16-mixed)")]["median"] == 55.0 and got[(32, "single (bf16-mixed)")]["runs"] == 3
    assert got[(32, "deepspeed ZeRO-2")]["median"] == 44.0
    assert got[(32, "deepspeed ZeRO-2")]["vs_plain"] == pytest.approx(44.0 / 55.0)
    assert got[(64, "deepspeed ZeRO-2")]["vs_plain"] is None


def test_medians_compare_with_plain_torch_and_with_ddp_as_plain(bench):
    def row(strategy, rate):
        return {
            "batch": 8,
            "compile": "on",
            "head": "fused",
            "attention": "default",
            "strategy": strategy,
            "tokens_per_s": rate,
            "repeat": 0,
        }

    rows = [row("ddp (bf16-mixed)", 90.0), row("torch DDP (bf16 autocast)", 100.0), row("deepspeed ZeRO-3", 80.0)]
    got = {m["strategy"]: m for m in bench.medians(rows)}
    assert got["deepspeed ZeRO-3"]["vs_torch"] == pytest.approx(0.8)
    assert got["deepspeed ZeRO-3"]["vs_plain"] == pytest.approx(80.0 / 90.0)
    assert got["torch DDP (bf16 autocast)"]["vs_torch"] == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("arch", "millions", "tied"),
    [("135M", 134.5, True), ("360M", 361.8, True), ("1.7B", 1711.4, True), ("13B", 13015.9, False)],
)
def test_architectures_have_their_parameter_counts(bench, arch, millions, tied):
    from transformers import LlamaForCausalLM

    with torch.device("meta"):  # shapes only: billions of parameters never take memory
        model = LlamaForCausalLM(bench.llama_config(arch))
    assert (model.lm_head.weight is model.model.embed_tokens.weight) == tied  # tied: counted once
    assert sum(p.numel() for p in model.parameters()) / 1e6 == pytest.approx(millions, abs=0.1)


def test_the_13b_plain_adamw_state_does_not_fit_one_h200(bench):
    """16 bytes a parameter (fp32 weights, gradients and AdamW's two moments) against the card's 141 GB."""
    from transformers import LlamaForCausalLM

    with torch.device("meta"):
        params = sum(p.numel() for p in LlamaForCausalLM(bench.llama_config("13B")).parameters())
    assert 16 * params > 141e9 > 16 * params / 2  # across two cards the same state takes half a card each


def test_arguments_take_the_new_strategies_and_refuse_unknown_ones(bench):
    args = bench.parse_args(["--arch", "1.7B", "--strategies", "torch,single,deepspeed3", "--gpus", "2"])
    assert (args.arch, args.gpus, args.seq, args.offload) == ("1.7B", 2, 512, "none")
    assert bench.parse_args(["--arch", "13B", "--offload", "optimizer"]).offload == "optimizer"
    with pytest.raises(SystemExit):
        bench.parse_args(["--offload", "disk"])
    with pytest.raises(SystemExit):
        bench.parse_args(["--offload", "all", "--strategies", "deepspeed,deepspeed3"])
    assert bench.parse_args(["--offload", "all", "--strategies", "single,deepspeed3"]).offload == "all"
    with pytest.raises(SystemExit):
        bench.parse_args(["--strategies", "torch,fsdp"])
    with pytest.raises(SystemExit):
        bench.parse_args(["--steps", "5", "--warmup", "5"])


def test_plain_torch_step_lowers_the_loss_on_a_repeated_batch(bench):
    from transformers import LlamaConfig, LlamaForCausalLM

    shape = dict(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2)
    config = LlamaConfig(vocab_size=300, num_hidden_layers=2, max_position_embeddings=64, **shape)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).train()
    step = bench.plain_torch.training_step(model, "hf", autocast=None, lr=1e-3)  # fp32 on the CPU
    batch = bench.batches(1, 4, 17, config.vocab_size)[0]
    seconds, losses = bench.plain_torch.timed_steps(step, [batch] * 12, warmup=2, device=torch.device("cpu"))
    assert seconds > 0 and len(losses) == 12
    assert losses[-1].item() < losses[0].item() - 0.5

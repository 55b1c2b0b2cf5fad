"""DeepSpeed ZeRO-2 and ZeRO-3 in bf16 on real GPUs: train the tiny model scaled to >= 100M parameters (on one
GPU, and on two in a launched process group where the machine has them), consolidate the ZeRO state into plain
weights, reload them into the policy and sample, and resume from the ZeRO state.

Marked `gpu`: skipped without CUDA or DeepSpeed, and never run by CI (which has no GPU). It imports
only torch, Lightning, DeepSpeed, safetensors and aitp's policy and training modules, so it runs on
a bare GPU image. With pytest:  python -m pytest tests/train/test_deepspeed_gpu.py -m gpu -o addopts=
Without pytest:                  python -m tests.train.test_deepspeed_gpu
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import torch

try:
    import pytest
except ImportError:  # a GPU image without pytest runs this file as a module (see the docstring)
    pytest = None

from aitp.checkpoints import ZERO_DIR, read_record, verify_checkpoint
from aitp.policies.base import SamplingParams
from aitp.policies.loading import load_policy
from aitp.policies.tiny import TinyConfig, TinyTransformer, chat_example, save_checkpoint
from aitp.tokenizer import ByteTokenizer
from aitp.train.config import TrainConfig
from aitp.train.run import fit, train_on

BIG = TinyConfig(n_layer=10, n_head=16, d_model=1024, max_seq_len=512)  # ~107M parameters
ZERO_PLANS = [
    (2, 1, "none", False),
    (3, 1, "none", False),
    (3, 1, "none", True),
    (3, 1, "optimizer", False),
    (2, 2, "none", False),
    (3, 2, "none", False),
    (3, 2, "none", True),
]
"""(ZeRO stage, GPUs, offload, compile) of each fit checked; plans of two GPUs are skipped on a machine of one.
Compiled ZeRO-3 on one GPU keeps its weights whole; on two it compiles block by block (`StrategyPlan`)."""
ONE_PROCESS = {"MASTER_ADDR": "127.0.0.1", "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1"}
"""The environment of a process group of one, for the checks that call `deepspeed.initialize` themselves."""
WORDS = ["banana", "gradient", "champion", "lakehouse", "verifier", "theorem", "rollout", "tactic"]


def reversal_examples(n: int = 96) -> list[dict]:
    """Fixed text data: spell a made-up word backwards, answer in tags."""
    out = []
    for i in range(n):
        word = WORDS[i % len(WORDS)] + WORDS[(i * 3 + 1) % len(WORDS)][: 1 + i % 5]
        prompt = [{"role": "system", "content": "Answer in tags."}, {"role": "user", "content": f"Reverse: {word}"}]
        out.append({"prompt": prompt, "completion": f"<answer>{word[::-1]}</answer>"})
    return out


def check_zero_bf16_trains_consolidates_reloads_and_samples(
    tmp: Path, zero_stage: int = 2, devices: int = 1, offload: str = "none", compile: bool = False
) -> dict:
    """A ZeRO fit as the loop runs it (`train_on`: in this process on one GPU, launched over several)."""
    torch.manual_seed(0)
    model = TinyTransformer(BIG)
    assert model.num_params() >= 100_000_000, model.num_params()
    base = save_checkpoint(tmp / "base", model)
    del model
    examples = reversal_examples()
    config = TrainConfig(
        steps=40,
        batch_size=8,
        lr=3e-4,
        warmup_steps=5,
        max_len=128,
        zero_stage=zero_stage,
        offload=offload,
        precision="bf16-mixed",
        devices=devices,
        compile=compile,
    )
    start = time.perf_counter()
    train_on(examples, base, config, tmp / "ckpt", {})
    seconds = time.perf_counter() - start
    result = read_record(tmp / "ckpt")
    first_loss, last_loss = result["losses"][0], result["losses"][-1]
    assert result["strategy"].startswith(f"deepspeed ZeRO-{zero_stage} offload={offload}"), result["strategy"]
    assert result["world_size"] == devices, result["world_size"]
    assert result["steps"] == 40 and last_loss < 0.5 * first_loss, result["losses"]

    ckpt = tmp / "ckpt"
    assert verify_checkpoint(ckpt) == "tiny" and (ckpt / ZERO_DIR / "latest").is_file()
    policy = load_policy(str(ckpt), device="cuda")
    assert next(policy.model.parameters()).dtype == torch.float32  # the fp32 master weights, consolidated
    # The consolidated weights are the trained ones: their loss on the training data is the final loss.
    tokenizer = ByteTokenizer()
    ids, targets = zip(*(chat_example(tokenizer, ex["prompt"], ex["completion"]) for ex in examples[:16]))
    losses = []
    with torch.no_grad():
        for i, t in zip(ids, targets):
            losses.append(float(policy.model.loss(torch.tensor([i], device="cuda"), torch.tensor([t], device="cuda"))))
    reloaded = sum(losses) / len(losses)
    assert reloaded < 0.5 * first_loss, (reloaded, first_loss)

    out = policy.sample([examples[0]["prompt"]], SamplingParams(temperature=0.0, max_tokens=24), seeds=[0])
    completion = out[0][0]
    assert completion.completion_tokens > 0

    # The ZeRO state resumes the run (optimizer and step count), rather than restarting it.
    resume = config.model_copy(update={"steps": 10, "resume": True, "compile": False})  # its graphs are compiled
    train_on(examples, ckpt, resume, tmp / "resumed", {})
    more = read_record(tmp / "resumed")
    assert more["steps"] == 50 and len(more["losses"]) == 10
    assert more["losses"][0] < 0.5 * first_loss, more["losses"]
    return {
        "device": f"{devices} x {torch.cuda.get_device_name(0)}",
        "strategy": result["strategy"],
        "compile": compile,
        "params": sum(p.numel() for p in policy.model.parameters()),
        "first_loss": round(first_loss, 4),
        "last_loss": round(last_loss, 4),
        "reloaded_loss": round(reloaded, 4),
        "seconds": round(seconds, 1),
        "resumed_losses": [round(x, 4) for x in more["losses"][:3]],
        "sample": completion.text,
    }


def check_fits_in_one_process_leave_no_optimizer_state_on_the_card(tmp: Path, zero_stage: int = 2) -> dict:
    """The loop trains in its own process every iteration: what a ZeRO fit leaves allocated must not grow."""
    torch.manual_seed(0)
    model = TinyTransformer(BIG)
    params = model.num_params()
    base = save_checkpoint(tmp / "base", model)
    del model
    config = TrainConfig(
        steps=3, batch_size=8, lr=3e-4, max_len=64, zero_stage=zero_stage, precision="bf16-mixed", devices=1
    )
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    left = []
    for i in range(2):
        fit(reversal_examples(32), base if i == 0 else tmp / f"ckpt{i - 1}", config, tmp / f"ckpt{i}")
        left.append(torch.cuda.memory_allocated() - before)
    state = 14 * params  # bf16 weights, fp32 master copies, Adam's two moments: what a leaked optimizer holds
    assert max(left) < 0.1 * state, (left, state)
    return {"zero_stage": zero_stage, "params": params, "left_after_each_fit_mib": [round(b / 2**20, 1) for b in left]}


def check_one_gpu_zero2_takes_the_one_process_shortcuts_and_skips_an_inf_step() -> dict:
    """The shortcuts (aitp.train.zero) on DeepSpeed's real ZeRO-2 optimizer: the same steps, inf skipped."""
    import os

    import deepspeed

    from aitp.train.strategy import Hardware, deepspeed_config, plan_strategy
    from aitp.train.zero import take_one_process_shortcuts

    for key, value in {**ONE_PROCESS, "MASTER_PORT": "29533"}.items():
        os.environ.setdefault(key, value)
    one_gpu = Hardware("cuda", 1, "gpu")
    plan = plan_strategy(one_gpu, zero_stage=2, precision="bf16-mixed", devices=1, micro_batch_size=4)
    config = deepspeed_config(plan) | {"bf16": {"enabled": True}, "gradient_clipping": 1.0}
    x = torch.randn(4, 256, device="cuda", dtype=torch.bfloat16, generator=torch.Generator("cuda").manual_seed(0))
    stepped, skipped, taken = [], [], []
    for shortcuts in (False, True):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.GELU(), torch.nn.Linear(256, 8)).cuda()
        engine, *_ = deepspeed.initialize(
            model=model, optimizer=torch.optim.AdamW(model.parameters(), lr=1e-2), config=config
        )
        taken.append(take_one_process_shortcuts(engine.optimizer) if shortcuts else False)
        for _ in range(2):  # the second step's gradients come after the first's were released
            engine.backward(engine(x).float().pow(2).mean())
            engine.step()
        after = [p.detach().float().clone() for p in engine.module.parameters()]
        engine.backward(engine(x).float().pow(2).mean() * float("inf"))  # every gradient inf or NaN
        engine.step()
        skipped.append(all(torch.equal(a, p.detach().float()) for a, p in zip(after, engine.module.parameters())))
        stepped.append(after)
        engine.destroy()
    assert taken == [False, True] and skipped == [True, True], (taken, skipped)
    # Two AdamW steps of 1e-2 move each weight by up to 2e-2; the runs differ only by the clipping norm's
    # float32 against DeepSpeed's float64, which leaves at most a bf16 rounding of the weights.
    diff = max(float((a - b).abs().max()) for a, b in zip(*stepped))
    assert diff <= 1e-3, diff
    return {"taken": taken, "skipped": skipped, "largest_weight_difference": diff}


class Holder(torch.nn.Module):
    """A network inside a module, as the policy is inside the trainer's LightningModule; `run` calls it."""

    def __init__(self, net: torch.nn.Module) -> None:
        super().__init__()
        self.net = net
        self.run = lambda x: self.net(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.run(x)


def check_one_process_zero3_keeps_weights_whole_compiles_as_one_graph_and_steps_as_zero2(device: str = "cuda") -> dict:
    """ZeRO-3 in one process (`StrategyPlan.whole_weights`, with the one-process shortcuts) on DeepSpeed's real
    optimizer: its per-module hooks gone, torch.compile traces the network as one graph with no break, and the
    steps (two micro-batches each, clipped) are those of DeepSpeed's own ZeRO-2, eager; an inf step is skipped."""
    import os

    import deepspeed
    import torch._dynamo.utils as dynamo_utils

    from aitp.train.strategy import Hardware, deepspeed_config, plan_strategy
    from aitp.train.zero import keep_weights_whole, take_one_process_shortcuts

    for key, value in {**ONE_PROCESS, "MASTER_PORT": "29534"}.items():
        os.environ.setdefault(key, value)
    one_gpu = Hardware("cuda", 1, "gpu")
    x = torch.randn(4, 256, device=device, generator=torch.Generator(device).manual_seed(0))
    losses, weights, graphs, skipped = {}, {}, {}, {}
    for stage in (2, 3):
        plan = plan_strategy(one_gpu, zero_stage=stage, precision="32-true", devices=1, micro_batch_size=2)
        assert plan.whole_weights == (stage == 3)
        config = deepspeed_config(plan) | {"gradient_accumulation_steps": 2, "gradient_clipping": 0.05}
        torch.manual_seed(0)
        model = Holder(torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.GELU(), torch.nn.Linear(256, 8)))
        optimizer = torch.optim.AdamW(model.to(device).parameters(), lr=1e-2)
        engine, *_ = deepspeed.initialize(model=model, optimizer=optimizer, config=config | {"train_batch_size": 4})
        if stage == 3:
            assert take_one_process_shortcuts(engine.optimizer), "ZeRO-3 in one process did not take the shortcuts"
            keep_weights_whole(engine.optimizer)
            layers = list(model.net.modules())  # (the engine keeps its own hooks on the whole model)
            assert not any(m._forward_pre_hooks or m._forward_hooks for m in layers), "ZeRO-3's hooks are still there"
            dynamo_utils.counters.clear()
            torch._dynamo.reset()
            model.run = torch.compile(model.run)  # as the trainer compiles its loss inside its LightningModule
        losses[stage] = []
        for _ in range(3):
            for half in (x[:2], x[2:]):  # the second micro-batch's gradients add to the first's
                loss = engine(half).pow(2).mean()
                engine.backward(loss)
                engine.step()
                losses[stage].append(float(loss))
        weights[stage] = [p.detach().float().clone() for p in engine.module.parameters()]
        for half in (x[:2], x[2:]):
            engine.backward(engine(half).pow(2).mean() * float("inf"))  # every gradient inf or NaN
            engine.step()
        skipped[stage] = all(
            torch.equal(w, p.detach().float()) for w, p in zip(weights[stage], engine.module.parameters())
        )
        if stage == 3:
            graphs = {"breaks": dict(dynamo_utils.counters["graph_break"]), **dynamo_utils.counters["stats"]}
        engine.destroy()
    assert graphs["breaks"] == {} and graphs["unique_graphs"] == 1, graphs
    assert skipped == {2: True, 3: True}, skipped
    assert all(w.numel() > 0 for w in weights[3]), "a weight was left partitioned"
    diff = max(float((a - b).abs().max()) for a, b in zip(weights[2], weights[3]))
    loss_diff = max(abs(a - b) / a for a, b in zip(losses[2], losses[3]))
    # fp32 both: the same steps up to the order of sums (compiled kernels) and the clipping norm's float32 against
    # ZeRO-2's float64, which AdamW's first steps can pass on to a weight; a step missed, applied to a stale copy or
    # to one micro-batch's gradients moves weights by up to 1e-2 (the rate) and fails here.
    assert diff <= 1e-3 and loss_diff <= 1e-4, (diff, losses)
    return {"losses": losses, "largest_weight_difference": diff, "graphs": graphs, "inf_skipped": skipped}


if pytest is not None:

    @pytest.mark.gpu
    @pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
    @pytest.mark.parametrize(("zero_stage", "devices", "offload", "compile"), ZERO_PLANS)
    def test_zero_bf16_trains_consolidates_reloads_and_samples(tmp_path, zero_stage, devices, offload, compile):
        pytest.importorskip("deepspeed")
        if torch.cuda.device_count() < devices:
            pytest.skip(f"needs {devices} GPUs")
        print(check_zero_bf16_trains_consolidates_reloads_and_samples(tmp_path, zero_stage, devices, offload, compile))

    @pytest.mark.gpu
    @pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
    def test_one_process_zero3_keeps_weights_whole_compiles_as_one_graph_and_steps_as_zero2():
        pytest.importorskip("deepspeed")
        print(check_one_process_zero3_keeps_weights_whole_compiles_as_one_graph_and_steps_as_zero2())

    @pytest.mark.gpu
    @pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
    def test_one_gpu_zero2_takes_the_one_process_shortcuts_and_skips_an_inf_step():
        pytest.importorskip("deepspeed")
        print(check_one_gpu_zero2_takes_the_one_process_shortcuts_and_skips_an_inf_step())

    @pytest.mark.gpu
    @pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
    @pytest.mark.parametrize("zero_stage", [2, 3])
    def test_fits_in_one_process_leave_no_optimizer_state_on_the_card(tmp_path, zero_stage):
        pytest.importorskip("deepspeed")
        print(check_fits_in_one_process_leave_no_optimizer_state_on_the_card(tmp_path, zero_stage))


if __name__ == "__main__":
    if not torch.cuda.is_available():
        raise SystemExit("needs a CUDA GPU")
    for stage, gpus, offload, compiled in ZERO_PLANS:
        if torch.cuda.device_count() < gpus:
            continue
        with tempfile.TemporaryDirectory() as tmp:
            print(check_zero_bf16_trains_consolidates_reloads_and_samples(Path(tmp), stage, gpus, offload, compiled))
            print(f"PASSED test_zero_bf16_trains_consolidates_reloads_and_samples[{stage}-{gpus}-{offload}-{compiled}]")
    for stage in (2, 3):
        with tempfile.TemporaryDirectory() as tmp:
            print(check_fits_in_one_process_leave_no_optimizer_state_on_the_card(Path(tmp), stage))
            print(f"PASSED test_fits_in_one_process_leave_no_optimizer_state_on_the_card[{stage}]")
    print(check_one_gpu_zero2_takes_the_one_process_shortcuts_and_skips_an_inf_step())
    print("PASSED test_one_gpu_zero2_takes_the_one_process_shortcuts_and_skips_an_inf_step")
    print(check_one_process_zero3_keeps_weights_whole_compiles_as_one_graph_and_steps_as_zero2())
    print("PASSED test_one_process_zero3_keeps_weights_whole_compiles_as_one_graph_and_steps_as_zero2")

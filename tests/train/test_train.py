"""Training on CPU: the loss falls, the checkpoint loads into the policy and samples, DPO and LoRA run."""

import json
import subprocess
import sys

import pytest

from aitp.checkpoints import EXAMPLES_FILE, RECORD_FILE, verify_checkpoint
from aitp.errors import AitpError
from aitp.policies.base import SamplingParams
from aitp.policies.loading import load_policy
from aitp.train.config import TrainConfig
from aitp.train.run import fit, train
from tests.train.helpers import SYSTEM, hf_llama_base, rollout_rows, tiny_base, write_items, write_rollouts

pytestmark = pytest.mark.usefixtures("one_thread")


def _examples(n=32):
    return [
        {
            "prompt": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"Calculate {i} + 1."}],
            "completion": f"<answer>{i + 1}</answer>",
            "rejected": f"<answer>{i}</answer> nope",
        }
        for i in range(n)
    ]


def test_a_few_sft_steps_lower_the_loss_and_the_checkpoint_samples(tmp_path):
    base = tiny_base(tmp_path / "base")
    config = TrainConfig(steps=30, batch_size=8, lr=3e-3, max_len=96)
    result = fit(_examples(), base, config, tmp_path / "ckpt", {"experiment": "t"})
    assert result.steps == 30 and len(result.losses) == 30
    assert result.last_loss < 0.6 * result.first_loss
    assert result.tokens > 0 and result.strategy.startswith("single") and result.world_size == 1
    assert verify_checkpoint(tmp_path / "ckpt") == "tiny"
    record = json.loads((tmp_path / "ckpt" / RECORD_FILE).read_text())
    assert record["config"]["steps"] == 30 and record["meta"] == {"experiment": "t"}
    phases = record["phases"]  # where the run's time went, adding up to it
    assert sorted(phases) == ["load_s", "save_s", "setup_s", "steps_s", "teardown_s"] and min(phases.values()) >= 0
    assert sum(phases.values()) == pytest.approx(record["seconds"], abs=0.01)
    # 30 steps outlast building the trainer and taking it down; each part was timed, not left at zero
    assert phases["steps_s"] > phases["setup_s"] + phases["teardown_s"] and phases["setup_s"] > 0
    assert len((tmp_path / "ckpt" / EXAMPLES_FILE).read_text().splitlines()) == 32

    policy = load_policy(str(tmp_path / "ckpt"), device="cpu")
    [[completion]] = policy.sample([_examples(1)[0]["prompt"]], SamplingParams(temperature=0.0, max_tokens=20), [0])
    assert completion.completion_tokens > 0 and completion.text.startswith("<")


def test_dpo_steps_raise_the_chosen_margin(tmp_path):
    base = tiny_base(tmp_path / "base")
    config = TrainConfig(objective="dpo", steps=15, batch_size=8, lr=2e-3, max_len=96, dpo_beta=0.5)
    result = fit(_examples(16), base, config, tmp_path / "ckpt")
    assert result.losses[0] == pytest.approx(0.6931, abs=1e-3)  # policy == reference at step 0
    assert result.last_loss < result.losses[0]


def test_train_reads_its_examples_from_the_lake(tmp_path):
    items = write_items(tmp_path, "e", 0, 8)
    write_rollouts(tmp_path, "e", 0, rollout_rows(items, [[1.0, 0.0]] * 8))
    base = tiny_base(tmp_path / "base")
    out = train(tmp_path, "e", 0, base, TrainConfig(steps=3, batch_size=4, max_len=96))
    assert out == tmp_path / "checkpoints" / "e" / "iter-000"
    lineage = [json.loads(line) for line in (out / EXAMPLES_FILE).read_text().splitlines()]
    assert len(lineage) == 8 and {(ex["keep_reason"], ex["keep_threshold"]) for ex in lineage} == {
        ("above_threshold", 0.7)
    }
    assert all(ex["threshold"] == 0.7 and ex["sample_index"] == 0 for ex in lineage)
    assert json.loads((out / RECORD_FILE).read_text())["meta"]["base_version"]


def test_a_missing_base_checkpoint_is_a_one_line_error(tmp_path):
    with pytest.raises(AitpError, match="does not exist") as err:
        fit(_examples(2), tmp_path / "nowhere", TrainConfig(steps=1), tmp_path / "out")
    assert "\n" not in str(err.value)
    assert not (tmp_path / "out").exists()


def test_hf_policy_trains_with_lora_and_saves_merged_weights(tmp_path):
    pytest.importorskip("transformers")
    pytest.importorskip("peft")
    base = hf_llama_base(tmp_path / "hf-base")
    cfg = TrainConfig(steps=12, batch_size=8, lr=1e-2, max_len=96, lora={"r": 4, "alpha": 8})
    result = fit(_examples(16), {"backend": "hf", "path": str(base)}, cfg, tmp_path / "ckpt")
    assert result.last_loss < result.first_loss
    assert verify_checkpoint(tmp_path / "ckpt") == "hf"
    policy = load_policy(str(tmp_path / "ckpt"), device="cpu")
    assert not any("lora" in name for name, _ in policy.model.named_parameters())
    [[completion]] = policy.sample([_examples(1)[0]["prompt"]], SamplingParams(temperature=0.0, max_tokens=5), [0])
    assert completion.completion_tokens > 0


def test_resume_needs_deepspeed_and_a_zero_state(tmp_path):
    from aitp.train.strategy import StrategyError

    base = tiny_base(tmp_path / "base")
    with pytest.raises(StrategyError, match="resume continues a DeepSpeed run"):
        fit(_examples(2), base, TrainConfig(steps=1, resume=True), tmp_path / "out")


@pytest.mark.parametrize("registered", [True, False])
def test_a_process_group_left_by_deepspeed_fits_is_destroyed_when_the_process_exits(tmp_path, registered):
    # A one-rank gloo group stands in for the NCCL group a DeepSpeed fit leaves (CUDA only); the exit path is the same.
    code = f"""
import atexit
import torch.distributed as dist
dist.init_process_group("gloo", init_method="file://{tmp_path / "store"}", rank=0, world_size=1)
atexit.register(lambda: print("initialized at exit:", dist.is_initialized()))  # runs after handlers registered later
from aitp.train import run
if {registered}:
    run._destroy_process_group_at_exit()
    run._destroy_process_group_at_exit()  # the loop's every fit asks; one handler is registered
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"initialized at exit: {not registered}" in done.stdout

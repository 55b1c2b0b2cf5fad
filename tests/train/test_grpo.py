"""GRPO: group advantages, the clipped surrogate, the sampler/trainer agreement, a fit from the lake."""

import json
import math

import pytest
import torch

from aitp.checkpoints import RECORD_FILE
from aitp.policies.base import SamplingParams
from aitp.policies.loading import load_policy
from aitp.train.config import TrainConfig
from aitp.train.data import NoTrainingDataError, select_examples
from aitp.train.grpo import Surrogate, clipped_surrogate, group_advantages, logprob_gap, planned_order, step_tokens
from aitp.train.module import encode_examples, load_trainable, sampled_token_logprobs
from aitp.train.run import fit, train
from tests.train.helpers import SYSTEM, hf_llama_base, rollout_rows, tiny_base, write_items, write_rollouts

pytestmark = pytest.mark.usefixtures("one_thread")


def test_advantages_are_scores_less_the_group_mean_scaled_by_its_std_on_request():
    assert group_advantages([1.0, 0.0, 0.0, 1.0]) == [0.5, -0.5, -0.5, 0.5]
    assert group_advantages([1.0, 0.0, 0.0, 0.0]) == pytest.approx([0.75, -0.25, -0.25, -0.25])
    scaled = group_advantages([1.0, 0.0, 0.0, 0.0], scale_std=True)  # std sqrt(3)/4
    assert scaled == pytest.approx([3 / 3**0.5, -1 / 3**0.5, -1 / 3**0.5, -1 / 3**0.5])
    assert group_advantages([0.8, 0.8, 0.8]) is None  # no signal: skipped
    assert group_advantages([0.8, 0.8], keep_uniform=True) == [0.0, 0.0]
    assert group_advantages([0.0, 0.0], scale_std=True, keep_uniform=True) == [0.0, 0.0]  # no division by zero


def _surrogate_grad(ratio: float, advantage: float, low: float = 0.2, high: float = 0.2) -> float:
    sampled = torch.tensor([[-1.0]])
    logp = (sampled + torch.log(torch.tensor(ratio))).requires_grad_(True)
    surrogate = Surrogate(clip_low=low, clip_high=high)
    loss = clipped_surrogate(logp, sampled, torch.tensor([advantage]), torch.tensor([[True]]), surrogate)
    loss.backward()
    return float(logp.grad)


def test_at_ratio_one_the_surrogate_is_the_plain_policy_gradient():
    sampled = torch.tensor([[-1.0, -2.0, -0.5], [-0.3, -0.7, -9.0]])
    mask = torch.tensor([[True, True, True], [True, True, False]])
    advantages = torch.tensor([0.75, -0.25])
    logp = sampled.clone().requires_grad_(True)
    clipped_surrogate(logp, sampled, advantages, mask, Surrogate("bnpo")).backward()
    plain = sampled.clone().requires_grad_(True)  # -sum(A * log p) / tokens: REINFORCE with a group baseline
    (-(advantages[:, None] * plain * mask).sum() / mask.sum()).backward()
    assert torch.allclose(logp.grad, plain.grad) and logp.grad[1, 2] == 0


def test_the_clip_stops_the_gradient_past_it_on_the_side_the_advantage_pushes():
    assert _surrogate_grad(1.1, 1.0) == pytest.approx(-1.1)  # inside the clip: -A * ratio
    assert _surrogate_grad(1.3, 1.0) == 0.0  # would raise a token already raised past 1 + eps
    assert _surrogate_grad(0.7, -1.0) == 0.0  # would lower a token already lowered past 1 - eps
    assert _surrogate_grad(1.3, -1.0) == pytest.approx(1.3)  # a step back towards the sampler is never clipped
    assert _surrogate_grad(0.7, 1.0) == pytest.approx(-0.7)
    # DAPO's clip-higher: a rewarded token may grow to 1 + 0.28 while the lower side stays at 1 - 0.2
    assert _surrogate_grad(1.25, 1.0, high=0.28) == pytest.approx(-1.25)
    assert _surrogate_grad(1.3, 1.0, high=0.28) == 0.0 and _surrogate_grad(0.75, -1.0, high=0.28) == 0.0


def test_the_four_loss_types_average_the_same_token_losses_as_trl_names_them():
    sampled = torch.zeros(2, 4)  # ratio 1: each token's loss is -A
    mask = torch.tensor([[True, False, False, False], [True, True, True, True]])
    advantages = torch.tensor([1.0, 1.0])

    def loss(kind: str, denominator=None) -> float:
        return float(clipped_surrogate(sampled, sampled, advantages, mask, Surrogate(kind), None, denominator))

    assert loss("grpo") == pytest.approx(-1.0)  # each sequence's mean (-1, -1), then their mean
    assert loss("bnpo") == pytest.approx(-5 / 5)  # over the 5 tokens
    skewed = torch.tensor([2.0, 0.0])  # the one-token answer rewarded, the long one not
    per_sequence = clipped_surrogate(sampled, sampled, skewed, mask, Surrogate("grpo"))
    per_token = clipped_surrogate(sampled, sampled, skewed, mask, Surrogate("bnpo"))
    assert float(per_sequence) == pytest.approx(-1.0) and float(per_token) == pytest.approx(-2 / 5)
    assert loss("dr_grpo", 2 * 4) == pytest.approx(-5 / 8)  # rows x the longest completion, whatever is masked
    assert loss("dapo", 10) == pytest.approx(-5 / 10)  # the optimizer step's tokens, given by the caller
    with pytest.raises(ValueError, match="pass its denominator"):
        loss("dapo")
    with pytest.raises(ValueError, match="unknown grpo loss"):
        Surrogate("ppo")


def test_the_planned_order_takes_every_sample_once_per_epoch_and_counts_each_steps_tokens():
    order = planned_order(5, 3, seed=7)
    assert [sorted(order[i : i + 5]) for i in (0, 5, 10)] == [[0, 1, 2, 3, 4]] * 3
    assert order[:5] != order[5:10] or order[5:10] != order[10:]  # each epoch its own permutation
    assert planned_order(5, 3, seed=7) == order and planned_order(5, 3, seed=8) != order
    tokens = [1, 10, 100, 1000, 10000]
    counts = step_tokens([0, 1, 2, 3, 4], tokens, rows_per_step=2)
    assert counts == [11, 11, 1100, 1100, 10000]  # the last step takes what is left


def test_the_kl_term_is_zero_with_zero_gradient_at_the_reference_and_positive_away():
    ref = torch.tensor([[-1.0, -2.0]])
    mask = torch.ones_like(ref, dtype=torch.bool)
    zero = torch.zeros(1)
    at = ref.clone().requires_grad_(True)
    loss = clipped_surrogate(at, ref, zero, mask, Surrogate(kl_beta=1.0), ref)
    loss.backward()
    assert float(loss.detach()) == 0.0 and torch.all(at.grad == 0)
    away = clipped_surrogate(ref - 0.5, ref, zero, mask, Surrogate(kl_beta=1.0), ref)
    assert float(away) > 0


def test_the_logprob_gap_is_the_mean_absolute_difference_over_the_mask():
    recorded = torch.tensor([[-1.0, -2.0, 5.0]])
    gap, tokens = logprob_gap(recorded, torch.tensor([[-1.5, -1.0, 0.0]]), torch.tensor([[True, True, False]]))
    assert (gap, tokens) == (pytest.approx(0.75), 2)


def _sampled_examples(base, n_items=4, group=4, scores=None):
    """Groups the tiny base really sampled (T=1), with the tokens and log-probs the sampler recorded."""
    policy = load_policy(str(base), device="cpu")
    prompts = [
        [{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"Add {i} and 1."}] for i in range(n_items)
    ]
    groups = policy.sample(prompts, SamplingParams(n=group, temperature=1.0, max_tokens=16), list(range(n_items)))
    out = []
    for i, (prompt, completions) in enumerate(zip(prompts, groups)):
        for k, c in enumerate(completions):
            score = scores[k] if scores is not None else float(k == 0)
            out.append(
                {
                    "source": "rollout",
                    "group_id": f"g{i}",
                    "sample_index": k,
                    "prompt": json.dumps(prompt),
                    "completion": c.text,
                    "score": score,
                    "advantage": score - (sum(scores) / len(scores) if scores else 1 / group),
                    "token_ids": c.token_ids,
                    "token_logprobs": c.logprobs,
                }
            )
    return out


def test_the_trainer_recomputes_the_sampler_logprobs_on_the_same_tokens_in_fp32(tmp_path):
    base = tiny_base(tmp_path / "base")
    examples = _sampled_examples(base)
    trainable = load_trainable(str(base))
    encoded = encode_examples(trainable, examples, "grpo", max_len=512)
    assert [sum(marks) for _, marks, _, _ in encoded] == [len(ex["token_ids"]) for ex in examples]
    _, gap, tokens = sampled_token_logprobs(trainable, encoded, batch_size=5)
    assert tokens == sum(len(ex["token_ids"]) for ex in examples) and gap < 1e-4
    _, bf16, _ = sampled_token_logprobs(trainable, encoded, batch_size=5, precision="bf16-mixed")
    assert bf16 > 10 * gap  # measured in the arithmetic training runs in: bf16 under autocast shows its rounding
    shifted = [{**ex, "token_logprobs": [lp - 0.1 for lp in ex["token_logprobs"]]} for ex in examples]
    _, off, _ = sampled_token_logprobs(trainable, encode_examples(trainable, shifted, "grpo", 512), batch_size=5)
    assert off == pytest.approx(0.1, abs=1e-4)  # the figure sees a sampler that disagrees


def _completion_logprob(trainable, example) -> float:
    [(ids, marks, _, _)] = encode_examples(trainable, [example], "grpo", 512)
    logp = trainable.model.token_logprobs(torch.tensor([ids]))[0]
    return float((logp * torch.tensor(marks[1:], dtype=logp.dtype)).sum())


def test_grpo_steps_raise_the_rewarded_samples_and_record_the_gap(tmp_path):
    base = tiny_base(tmp_path / "base")
    examples = _sampled_examples(base, n_items=4, group=4, scores=[1.0, 0.0, 0.0, 0.0])
    config = TrainConfig(objective="grpo", batch_size=8, lr=3e-3, max_len=256, grpo_epochs=3)
    result = fit(examples, base, config, tmp_path / "ckpt")
    assert result.objective == "grpo" and result.steps == 6 and result.groups == 4  # 3 passes over 2 batches
    assert result.logprob_gap is not None and result.logprob_gap < 1e-4
    record = json.loads((tmp_path / "ckpt" / RECORD_FILE).read_text())
    assert record["logprob_gap"] == result.logprob_gap and record["config"]["grpo_epochs"] == 3
    before, after = load_trainable(str(base)), load_trainable(str(tmp_path / "ckpt"))
    rewarded = [ex for ex in examples if ex["score"] == 1.0]
    rest = [ex for ex in examples if ex["score"] == 0.0]
    gain = [_completion_logprob(after, ex) - _completion_logprob(before, ex) for ex in rewarded]
    loss = [_completion_logprob(after, ex) - _completion_logprob(before, ex) for ex in rest]
    assert min(gain) > 0 and sum(gain) / len(gain) > sum(loss) / len(loss)


def test_grpo_selects_every_group_with_differing_scores_from_the_lake(tmp_path):
    items = write_items(tmp_path, "e", 0, 3)
    rows = rollout_rows(items, [[1.0, 0.0], [1.0, 1.0], [0.5, 0.0]])
    for row in rows:  # tokens as a byte-level sampler records them: one per byte of the completion and the eos
        row["token_ids"] = list(row["completion"].encode()) + [1]
        row["token_logprobs"] = [-1.0] * len(row["token_ids"])
    write_rollouts(tmp_path, "e", 0, rows)
    config = TrainConfig(objective="grpo", threshold=0.7)
    examples = select_examples(tmp_path, "e", 0, config)
    # the third group clears no threshold, yet ranks its answers: it is trained on; the uniform one is not
    advantages = [(ex["group_id"], ex["advantage"]) for ex in examples]
    assert sorted(advantages) == [("g0-0", -0.5), ("g0-0", 0.5), ("g0-2", -0.25), ("g0-2", 0.25)]
    kept = select_examples(tmp_path, "e", 0, config.model_copy(update={"grpo_keep_uniform": True}))
    assert sorted(ex["group_id"] for ex in kept) == ["g0-0", "g0-0", "g0-1", "g0-1", "g0-2", "g0-2"]
    out = train(tmp_path, "e", 0, tiny_base(tmp_path / "base"), config.model_copy(update={"grpo_max_steps": 1}))
    assert json.loads((out / RECORD_FILE).read_text())["steps"] == 1  # the cap: one step of the two passes need
    assert json.loads((out / RECORD_FILE).read_text())["objective"] == "grpo"


def test_a_lake_without_recorded_tokens_is_a_one_line_error(tmp_path):
    items = write_items(tmp_path, "e", 0, 1)
    write_rollouts(tmp_path, "e", 0, rollout_rows(items, [[1.0, 0.0]]))
    with pytest.raises(NoTrainingDataError, match="run the iteration's rollouts again") as err:
        select_examples(tmp_path, "e", 0, TrainConfig(objective="grpo"))
    assert "\n" not in str(err.value)


def test_grpo_settings_take_effect_or_are_refused_and_stay_out_of_old_dumps():
    assert TrainConfig().model_dump() == TrainConfig(objective="sft").model_dump()
    assert not any(k.startswith("grpo_") for k in TrainConfig(objective="grpo").model_dump())
    assert TrainConfig(objective="grpo", grpo_scale_std=True).model_dump()["grpo_scale_std"] is True
    assert "lr_schedule" not in TrainConfig().model_dump() and "steps" not in TrainConfig(objective="grpo").model_dump()
    dumped = TrainConfig(objective="grpo", grpo_loss="dapo", grpo_clip_high=0.28, lr_schedule="cosine").model_dump()
    assert (dumped["grpo_loss"], dumped["grpo_clip_high"], dumped["lr_schedule"]) == ("dapo", 0.28, "cosine")
    assert TrainConfig.model_validate(dumped) == TrainConfig.model_validate(dumped)  # a dump reads back as it was
    for bad, why in (
        ({"grpo_clip_low": 0.1}, "apply to objective grpo only"),
        ({"objective": "grpo", "grpo_clip_eps": 0.2}, "set grpo_clip_low and grpo_clip_high"),
        ({"objective": "grpo", "steps": 100}, "cap them with grpo_max_steps"),
        ({"objective": "grpo", "grpo_loss": "ppo"}, "grpo_loss"),
        ({"lr_schedule": "step"}, "lr_schedule"),
        ({"objective": "grpo", "data_iterations": "all"}, "set data_iterations current"),
        ({"objective": "grpo", "demonstrations": True}, "demonstrations train with sft only"),
        ({"objective": "grpo", "distinct_completions": True}, "remove it for grpo"),
        ({"objective": "grpo", "grpo_clip_low": 1.5}, "less than 1"),
    ):
        with pytest.raises(ValueError, match=why):
            TrainConfig.model_validate(bad)


def test_a_hugging_face_policy_trains_with_grpo_through_the_same_module(tmp_path):
    pytest.importorskip("transformers")
    base = hf_llama_base(tmp_path / "hf-base")
    examples = _sampled_examples(base, n_items=2, group=4)
    config = TrainConfig(objective="grpo", batch_size=4, lr=1e-3, max_len=256, grpo_kl_beta=0.1)
    result = fit(examples, {"backend": "hf", "path": str(base)}, config, tmp_path / "ckpt")
    assert result.steps == 2 and result.logprob_gap < 1e-4  # one pass over 8 samples; the HF sampler's own numbers


@pytest.mark.parametrize("loss", ["grpo", "dr_grpo", "dapo"])
def test_every_pass_trains_on_every_sample_in_minibatches_of_accumulated_steps(tmp_path, loss):
    base = tiny_base(tmp_path / "base")
    examples = _sampled_examples(base, n_items=3, group=4)  # 12 samples
    config = TrainConfig(objective="grpo", batch_size=4, grad_accum=2, grpo_epochs=2, grpo_loss=loss, max_len=256)
    result = fit(examples, base, config, tmp_path / "ckpt")
    assert result.steps == 3  # 24 samples in micro-batches of 4, two to a step
    trainable = load_trainable(str(base))
    lengths = [len(ids) for ids, _, _, _ in encode_examples(trainable, examples, "grpo", 256)]
    assert result.tokens == 2 * sum(lengths)  # each sample's tokens twice: every sample in every pass
    assert all(loss == loss for loss in result.losses)  # finite: the step's denominators were all given


def test_the_learning_rate_follows_its_schedule_to_zero_at_the_last_step(tmp_path):
    from aitp.train.module import PolicyModule, make_collate, pl
    from aitp.train.run import _quiet_lightning

    trainable = load_trainable(str(tiny_base(tmp_path / "base")))
    rows = [trainable.encode([{"role": "user", "content": f"q{i}"}], "a") for i in range(4)]
    loader = torch.utils.data.DataLoader(rows, batch_size=2, collate_fn=make_collate("sft", trainable.pad_id))

    class Rates(pl.Callback):
        def __init__(self) -> None:
            self.seen: list[float] = []

        def on_train_batch_start(self, trainer, module, batch, batch_idx):
            self.seen.append(trainer.optimizers[0].param_groups[0]["lr"])

    rates = {}
    for schedule in ("constant", "linear", "cosine"):
        _quiet_lightning()
        recorder = Rates()
        module = PolicyModule(trainable.model, "tiny", lr=1.0, warmup_steps=2, lr_schedule=schedule)
        trainer = pl.Trainer(
            accelerator="cpu",
            max_steps=10,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            callbacks=[recorder],
        )
        trainer.fit(module, loader)
        rates[schedule] = recorder.seen
    assert rates["constant"][:3] == pytest.approx([1 / 3, 2 / 3, 1.0]) and rates["constant"][-1] == 1.0
    assert rates["linear"][:3] == rates["constant"][:3] and rates["linear"][-1] == pytest.approx(1 / 8)
    assert rates["cosine"][-1] == pytest.approx(0.5 * (1 + math.cos(math.pi * 7 / 8)))
    assert all(a >= b for a, b in zip(rates["linear"][2:], rates["linear"][3:]))  # decays, never rises
    with pytest.raises(Exception, match="lr_schedule"):
        PolicyModule(trainable.model, "tiny", lr_schedule="step")

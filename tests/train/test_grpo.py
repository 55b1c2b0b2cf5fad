"""GRPO: group advantages, the clipped surrogate, the sampler/trainer agreement, a fit from the lake."""

import json

import pytest
import torch

from aitp.checkpoints import RECORD_FILE
from aitp.policies.base import SamplingParams
from aitp.policies.loading import load_policy
from aitp.train.config import TrainConfig
from aitp.train.data import NoTrainingDataError, select_examples
from aitp.train.grpo import clipped_surrogate, group_advantages, logprob_gap
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


def _surrogate_grad(ratio: float, advantage: float, clip_eps: float = 0.2) -> float:
    sampled = torch.tensor([[-1.0]])
    logp = (sampled + torch.log(torch.tensor(ratio))).requires_grad_(True)
    loss = clipped_surrogate(logp, sampled, torch.tensor([advantage]), torch.tensor([[True]]), clip_eps)
    loss.backward()
    return float(logp.grad)


def test_at_ratio_one_the_surrogate_is_the_plain_policy_gradient():
    sampled = torch.tensor([[-1.0, -2.0, -0.5], [-0.3, -0.7, -9.0]])
    mask = torch.tensor([[True, True, True], [True, True, False]])
    advantages = torch.tensor([0.75, -0.25])
    logp = sampled.clone().requires_grad_(True)
    clipped_surrogate(logp, sampled, advantages, mask, 0.2).backward()
    plain = sampled.clone().requires_grad_(True)  # -sum(A * log p) / tokens: REINFORCE with a group baseline
    (-(advantages[:, None] * plain * mask).sum() / mask.sum()).backward()
    assert torch.allclose(logp.grad, plain.grad) and logp.grad[1, 2] == 0


def test_the_clip_stops_the_gradient_past_it_on_the_side_the_advantage_pushes():
    assert _surrogate_grad(1.1, 1.0) == pytest.approx(-1.1)  # inside the clip: -A * ratio
    assert _surrogate_grad(1.3, 1.0) == 0.0  # would raise a token already raised past 1 + eps
    assert _surrogate_grad(0.7, -1.0) == 0.0  # would lower a token already lowered past 1 - eps
    assert _surrogate_grad(1.3, -1.0) == pytest.approx(1.3)  # a step back towards the sampler is never clipped
    assert _surrogate_grad(0.7, 1.0) == pytest.approx(-0.7)


def test_the_kl_term_is_zero_with_zero_gradient_at_the_reference_and_positive_away():
    ref = torch.tensor([[-1.0, -2.0]])
    mask = torch.ones_like(ref, dtype=torch.bool)
    zero = torch.zeros(1)
    at = ref.clone().requires_grad_(True)
    loss = clipped_surrogate(at, ref, zero, mask, 0.2, ref, kl_beta=1.0)
    loss.backward()
    assert float(loss.detach()) == 0.0 and torch.all(at.grad == 0)
    away = clipped_surrogate(ref - 0.5, ref, zero, mask, 0.2, ref, kl_beta=1.0)
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
    config = TrainConfig(objective="grpo", steps=50, batch_size=8, lr=3e-3, max_len=256, grpo_epochs=3)
    result = fit(examples, base, config, tmp_path / "ckpt")
    assert result.objective == "grpo" and result.steps == 6  # 3 passes over 2 batches: before the 50-step cap
    assert result.logprob_gap is not None and result.logprob_gap < 1e-4
    record = json.loads((tmp_path / "ckpt" / RECORD_FILE).read_text())
    assert record["logprob_gap"] == result.logprob_gap and record["config"]["grpo_epochs"] == 3
    before, after = load_trainable(str(base)), load_trainable(str(tmp_path / "ckpt"))
    rewarded = [ex for ex in examples if ex["score"] == 1.0]
    rest = [ex for ex in examples if ex["score"] == 0.0]
    gain = [_completion_logprob(after, ex) - _completion_logprob(before, ex) for ex in rewarded]
    loss = [_completion_logprob(after, ex) - _completion_logprob(before, ex) for ex in rest]
    assert min(gain) > 0 and sum(gain) / len(gain) > sum(loss) / len(loss)


def test_grpo_selects_kept_groups_with_differing_scores_from_the_lake(tmp_path):
    items = write_items(tmp_path, "e", 0, 3)
    rows = rollout_rows(items, [[1.0, 0.0], [1.0, 1.0], [0.5, 0.0]])
    for row in rows:  # tokens as a byte-level sampler records them: one per byte of the completion and the eos
        row["token_ids"] = list(row["completion"].encode()) + [1]
        row["token_logprobs"] = [-1.0] * len(row["token_ids"])
    write_rollouts(tmp_path, "e", 0, rows)
    config = TrainConfig(objective="grpo", threshold=0.7)
    examples = select_examples(tmp_path, "e", 0, config)
    assert [(ex["group_id"], ex["advantage"]) for ex in examples] == [("g0-0", 0.5), ("g0-0", -0.5)]
    kept = select_examples(tmp_path, "e", 0, config.model_copy(update={"grpo_keep_uniform": True}))
    assert [ex["group_id"] for ex in kept] == ["g0-0", "g0-0", "g0-1", "g0-1"]  # the dropped group stays out
    out = train(tmp_path, "e", 0, tiny_base(tmp_path / "base"), config.model_copy(update={"steps": 2}))
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
    for bad, why in (
        ({"grpo_clip_eps": 0.1}, "apply to objective grpo only"),
        ({"objective": "grpo", "data_iterations": "all"}, "set data_iterations current"),
        ({"objective": "grpo", "demonstrations": True}, "demonstrations train with sft only"),
        ({"objective": "grpo", "distinct_completions": True}, "remove it for grpo"),
        ({"objective": "grpo", "grpo_clip_eps": 1.5}, "less than 1"),
    ):
        with pytest.raises(ValueError, match=why):
            TrainConfig.model_validate(bad)


def test_a_hugging_face_policy_trains_with_grpo_through_the_same_module(tmp_path):
    pytest.importorskip("transformers")
    base = hf_llama_base(tmp_path / "hf-base")
    examples = _sampled_examples(base, n_items=2, group=4)
    config = TrainConfig(objective="grpo", steps=5, batch_size=4, lr=1e-3, max_len=256, grpo_kl_beta=0.1)
    result = fit(examples, {"backend": "hf", "path": str(base)}, config, tmp_path / "ckpt")
    assert result.steps == 2 and result.logprob_gap < 1e-4  # one pass over 8 samples; the HF sampler's own numbers

"""Strict scores agree with the reference environment's rules on many tricky completions.

`reference_raw_score` restates the rules of the seed's reference (NousResearch/atropos,
reasoning_gym_environment.py) independently of aitp's code: think blocks removed only to count answer
pairs (case-insensitive); more than one pair outside them scores 0; otherwise the last
case-sensitive `<answer>` match (one optional space trimmed inside, then stripped) is scored bare
and tag-wrapped, each clamped to [0, 1], the higher kept; no match scores 0.
"""

import random
import re

import pytest

from aitp.reasoning.items import dataset_for, generate_items, raw_entry
from aitp.reasoning.scoring import score_completion


def reference_raw_score(text, dataset, entry):
    outside = re.sub(r"<think>.*?</think>", "", text, flags=re.DOTALL | re.IGNORECASE)
    if len(re.findall(r"<answer>.*?</answer>", outside, flags=re.DOTALL | re.IGNORECASE)) > 1:
        return 0.0
    found = [m.group(1) for m in re.finditer(r"<answer>\s?(.*?)\s?</answer>", text, flags=re.DOTALL)]
    if not found:
        return 0.0
    answer = found[-1].strip()
    best = 0.0
    for candidate in (answer, "<answer>" + answer + "</answer>"):
        try:
            best = max(best, max(0.0, min(1.0, float(dataset.score_answer(answer=candidate, entry=entry)))))
        except Exception:
            pass
    return best


def tricky_completion(rng, gold, wrong):
    def ans(value):
        open_tag = rng.choice(["<answer>", "<ANSWER>", "<Answer>", "<answer>"])
        close_tag = rng.choice(["</answer>", "</ANSWER>", "</answer>", ""])
        pad = rng.choice(["", " ", "  ", "\n", "\n\n", "\t", " \n "])
        return f"{open_tag}{pad}{value}{rng.choice(['', ' ', chr(10), '  '])}{close_tag}"

    parts = []
    for _ in range(rng.randint(0, 4)):
        kind = rng.random()
        value = rng.choice([gold, gold, wrong, gold.upper(), f" {gold}.", ""])
        if kind < 0.35:
            parts.append(ans(value))
        elif kind < 0.6:
            think_open = rng.choice(["<think>", "<THINK>", "<think>"])
            think_close = rng.choice(["</think>", "</Think>", "</think>", ""])
            parts.append(f"{think_open}reasoning {ans(value) if rng.random() < 0.6 else value}{think_close}")
        elif kind < 0.8:
            parts.append(rng.choice(["So the answer is", "\n", "Let me check.", "<answer>", "</answer>"]))
        else:
            parts.append(value)
    return rng.choice(["", "\n", " "]).join(parts)


@pytest.mark.parametrize("task", ["basic_arithmetic", "spell_backward", "word_ladder", "gsm_symbolic", "chain_sum"])
def test_strict_scores_match_reference_on_tricky_completions(task):
    rng = random.Random(task)
    items = generate_items(task, 4, seed=5, split="eval")
    checked = 0
    for item in items:
        dataset = dataset_for(item.task, item.config, item.seed)
        entry = raw_entry(item.task, item.config, item.seed, item.index)
        for _ in range(150):
            text = tricky_completion(rng, item.answer, "wrong")
            assert score_completion(item, text).raw == reference_raw_score(text, dataset, entry), text
            checked += 1
    assert checked == 600


def test_the_generator_covers_each_rule():
    rng = random.Random(1)
    texts = [tricky_completion(rng, "42", "7") for _ in range(600)]
    item = generate_items("basic_arithmetic", 1, seed=5, split="eval")[0]
    errors = {score_completion(item, t).format_error for t in texts}
    assert errors == {None, "no_answer_tag", "multiple_answer_tags"}

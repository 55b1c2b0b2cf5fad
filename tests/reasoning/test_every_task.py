"""Over every registered reasoning-gym task: gold answers score 1, format violations score 0."""

import json

import pytest
from reasoning_gym import factory

from aitp.reasoning.extraction import MULTIPLE_ANSWER_TAGS, NO_ANSWER_TAG
from aitp.reasoning.items import generate_items
from aitp.reasoning.scoring import score_completion, verifier_entry
from aitp.reasoning.tasks import SOLUTION_CHECKED_TASKS, list_tasks

TASKS = [t.name for t in list_tasks()]

# Solution-checked tasks: where the metadata carries one accepted solution, it must score 1.
EXAMPLE_ANSWER_KEY = {
    "graph_color": "possible_answer",
    "propositional_logic": "example_answer",
    "rubiks_cube": "example_correct_answer",
}
# boxnet and rush_hour ship no example solution at all: only the refusal of a wrong answer is checked.
NO_EXAMPLE = {"boxnet", "rush_hour"}


def test_discovers_every_registered_task():
    assert len(TASKS) == len(factory.DATASETS) >= 100
    assert set(TASKS) == set(factory.DATASETS)
    for info in list_tasks():
        assert info.category and info.has_curriculum == factory.has_curriculum(info.name)
    assert set(EXAMPLE_ANSWER_KEY) | NO_EXAMPLE == SOLUTION_CHECKED_TASKS


@pytest.mark.parametrize("task", TASKS)
def test_gold_scores_one_and_format_violations_zero(task):
    items = generate_items(task, 2, seed=7, split="eval")
    assert len(items) == 2
    for item in items:
        if task in NO_EXAMPLE:
            assert item.answer is None
            assert score_completion(item, "<answer>not a solution</answer>").raw < 1.0
            gold = "x"
        elif task in EXAMPLE_ANSWER_KEY:
            example = item.metadata[EXAMPLE_ANSWER_KEY[task]]
            gold = example if isinstance(example, str) else json.dumps(example)
            assert score_completion(item, f"<answer>{gold}</answer>").raw == 1.0
        else:
            gold = item.answer
            assert gold is not None
            assert score_completion(item, f"<think>hmm</think><answer>{gold}</answer>").raw == 1.0
        regenerated = verifier_entry(item, regenerate=True)
        for text in (f"<answer>{gold}</answer>", "<answer>garbage</answer>", f"<answer> {gold}. </answer>"):
            assert score_completion(item, text).raw == score_completion(item, text, regenerated).raw
        no_tag = score_completion(item, gold)
        assert (no_tag.raw, no_tag.format_error) == (0.0, NO_ANSWER_TAG)
        twice = score_completion(item, f"<answer>{gold}</answer> or <answer>{gold}</answer>")
        assert (twice.raw, twice.format_error) == (0.0, MULTIPLE_ANSWER_TAGS)

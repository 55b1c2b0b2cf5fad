"""Items are deterministic, regenerable from their identity, and train never meets eval."""

import random

import numpy as np
import pytest
from reasoning_gym import factory

from aitp.errors import BadInputError, UnknownTaskError
from aitp.reasoning.items import Item, generate_items, level_config, regenerate, split_seed, top_level


def test_same_arguments_give_same_items():
    a = generate_items("basic_arithmetic", 20, seed=3, split="train", difficulty="random")
    b = generate_items("basic_arithmetic", 20, seed=3, split="train", difficulty="random")
    assert [i.to_dict() for i in a] == [i.to_dict() for i in b]
    c = generate_items("basic_arithmetic", 20, seed=4, split="train", difficulty="random")
    assert [i.question for i in a] != [i.question for i in c]


@pytest.mark.parametrize("task", ["codeio", "sudoku", "composite", "tower_of_hanoi", "graph_color"])
def test_items_regenerate_from_identity_alone(task):
    for item in generate_items(task, 3, seed=11, split="train"):
        again = Item.from_dict({"task": item.task, "config": item.config, "seed": item.seed, "index": item.index})
        assert (again.question, again.answer, again.item_id) == (item.question, item.answer, item.item_id)


def test_split_seeds_are_far_apart():
    seeds = {split_seed(s, split, t) for s in range(50) for split in ("train", "eval") for t in ("gcd", "lcm")}
    assert len(seeds) == 200
    ordered = sorted(seeds)
    assert min(b - a for a, b in zip(ordered, ordered[1:])) > 1000


def test_train_skips_eval_questions_in_small_problem_spaces():
    task = "tower_of_hanoi"  # few distinct questions: raw seeds do collide
    eval_questions = {i.question for i in generate_items(task, 100, seed=0, split="eval")}
    raw_train = factory.create_dataset(task, seed=split_seed(0, "train", task), size=200)
    assert any(x["question"] in eval_questions for x in raw_train), "the test needs a colliding task"
    train = generate_items(task, 200, seed=0, split="train", eval_size=100)
    assert len(train) == 200
    assert not eval_questions & {i.question for i in train}
    assert not {i.item_id for i in train} & {i.item_id for i in generate_items(task, 100, seed=0, split="eval")}


def test_generating_leaves_the_global_rngs_as_they_were_and_items_regenerate_one_by_one():
    random.seed(5)
    np.random.seed(5)
    expected = (random.random(), float(np.random.random()))
    random.seed(5)
    np.random.seed(5)
    train = generate_items("tower_of_hanoi", 30, seed=2, split="train", eval_size=40)
    assert (random.random(), float(np.random.random())) == expected
    for item in train:  # drawn in one pinned batch, rebuilt one at a time: the same entries
        again = regenerate(item.task, item.config, item.seed, item.index)
        assert (again.question, again.answer, again.metadata) == (item.question, item.answer, item.metadata)


def test_curriculum_level_is_stored_and_shapes_config():
    low = generate_items("basic_arithmetic", 5, seed=1, split="eval", difficulty=0)
    high = generate_items("basic_arithmetic", 5, seed=1, split="eval", difficulty=top_level("basic_arithmetic"))
    assert {i.level for i in low} == {0} and {i.level for i in high} == {top_level("basic_arithmetic")}
    assert low[0].config["max_terms"] < high[0].config["max_terms"]
    assert regenerate("basic_arithmetic", high[0].config, high[0].seed, high[0].index).level == high[0].level


def test_random_difficulty_spreads_levels():
    items = generate_items("basic_arithmetic", 40, seed=1, split="train", difficulty="random")
    assert len({i.level for i in items}) > 1


def test_bad_arguments_are_user_errors():
    with pytest.raises(UnknownTaskError, match="gcd"):
        generate_items("gdc", 1, seed=0)
    with pytest.raises(BadInputError, match="--n"):
        generate_items("gcd", -1, seed=0)
    with pytest.raises(BadInputError, match="split"):
        generate_items("gcd", 1, seed=0, split="test")
    with pytest.raises(BadInputError, match="no curriculum"):
        level_config("acre", 1)
    with pytest.raises(BadInputError, match="out of range"):
        level_config("gcd", 99)

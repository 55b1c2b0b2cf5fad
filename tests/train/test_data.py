"""Training examples selected from the lake with SQL: kept samples, preference pairs, demonstrations."""

import json

import pytest

from aitp.lake import write_partition
from aitp.train.config import TrainConfig
from aitp.train.data import NoTrainingDataError, select_examples
from tests.train.helpers import item_row, rollout_rows, write_items, write_rollouts

SCORES = [[1.0, 0.0, 0.0], [1.0, 1.0, 1.0], [0.5, 0.0, 0.0], [0.0, 0.0, 0.0], [0.9, 0.8, 0.2]]


@pytest.fixture
def lake(tmp_path):
    items = write_items(tmp_path, "e", 0, 6)
    write_rollouts(tmp_path, "e", 0, rollout_rows(items[:5], SCORES))
    return tmp_path, items


def test_sft_selects_samples_above_the_threshold_from_kept_groups(lake):
    home, items = lake
    examples = select_examples(home, "e", 0, TrainConfig())
    picked = [(ex["item_id"], ex["sample_index"]) for ex in examples]
    want = [(items[0].item_id, 0), (items[1].item_id, 0), (items[1].item_id, 1), (items[1].item_id, 2)]
    want += [(items[4].item_id, 0), (items[4].item_id, 1)]
    assert sorted(picked) == sorted(want)
    by_item = {ex["item_id"]: ex for ex in examples}
    assert by_item[items[1].item_id]["keep_reason"] == "uniform_above_threshold"
    assert by_item[items[0].item_id]["keep_reason"] == "above_threshold"
    assert all(ex["threshold"] == 0.7 and ex["source"] == "rollout" for ex in examples)
    assert json.loads(examples[0]["prompt"])[-1]["role"] == "user"


def test_distinct_completions_teach_each_answer_of_a_group_once(tmp_path):
    items = write_items(tmp_path, "e", 0, 2)
    rows = rollout_rows(items, [[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    for row in rows:  # item 0 answered the same way three times; item 1 in two ways
        row["completion"] = "<answer>same</answer>" if row["item_id"] == items[0].item_id else row["completion"]
    write_rollouts(tmp_path, "e", 0, rows)
    every = select_examples(tmp_path, "e", 0, TrainConfig())
    distinct = select_examples(tmp_path, "e", 0, TrainConfig(distinct_completions=True))
    assert len(every) == 5
    assert [(ex["item_id"], ex["sample_index"]) for ex in distinct] == sorted(
        [(items[0].item_id, 0), (items[1].item_id, 0), (items[1].item_id, 1)]
    )


def test_dpo_pairs_come_from_one_group_with_chosen_above_threshold_and_scored_higher(lake):
    home, items = lake
    pairs = select_examples(home, "e", 0, TrainConfig(objective="dpo", max_pairs_per_group=2))
    got = sorted((p["item_id"], p["sample_index"], p["rejected_index"]) for p in pairs)
    # item 0: 1.0 beats both zeros; item 4: widest gaps first (0.9-0.2, then 0.8-0.2); uniform item 1: none
    want = sorted(
        [(items[0].item_id, 0, 1), (items[0].item_id, 0, 2), (items[4].item_id, 0, 2), (items[4].item_id, 1, 2)]
    )
    assert got == want
    assert all(p["score"] > p["rejected_score"] and p["rejected"] != p["completion"] for p in pairs)


def test_demonstrations_use_gold_answers_and_say_so(lake):
    home, items = lake
    examples = select_examples(home, "e", 0, TrainConfig(demonstrations=True, system_prompt="S"))
    demos = [ex for ex in examples if ex["source"] == "demonstration"]
    assert len(demos) == 6 and len(examples) == 6 + 6
    first = next(d for d in demos if d["item_id"] == items[0].item_id)
    assert first["completion"] == f"<answer>{items[0].answer}</answer>"
    assert first["keep_reason"] == "demonstration" and first["threshold"] is None
    assert json.loads(first["prompt"]) == [
        {"role": "system", "content": "S"},
        {"role": "user", "content": items[0].question},
    ]
    only = select_examples(home, "e", 0, TrainConfig(demonstrations_only=True))
    assert {ex["source"] for ex in only} == {"demonstration"}


def test_eval_questions_never_become_training_examples(lake):
    home, items = lake
    write_partition(home, "items", "e", 0, [item_row(items[0], split="eval")], shard="eval-heldout")
    examples = select_examples(home, "e", 0, TrainConfig(demonstrations=True))
    assert items[0].item_id not in {ex["item_id"] for ex in examples}


def test_unfiltered_rollouts_and_empty_selections_are_one_line_errors(tmp_path):
    items = write_items(tmp_path, "e", 0, 2)
    write_partition(tmp_path, "rollouts", "e", 0, rollout_rows(items, [[1.0], [0.0]]))
    with pytest.raises(NoTrainingDataError, match="no keep decision"):
        select_examples(tmp_path, "e", 0, TrainConfig())
    write_rollouts(tmp_path, "e", 0, rollout_rows(items, [[0.1], [0.0]]))
    with pytest.raises(NoTrainingDataError, match="no kept samples scoring above 0.7") as err:
        select_examples(tmp_path, "e", 0, TrainConfig())
    assert "\n" not in str(err.value)


def test_all_iterations_reads_earlier_partitions(lake):
    home, items = lake
    write_rollouts(home, "e", 1, rollout_rows(items[5:], [[1.0, 0.0]], iteration=1))
    assert len(select_examples(home, "e", 1, TrainConfig())) == 1
    assert len(select_examples(home, "e", 1, TrainConfig(data_iterations="all"))) == 7

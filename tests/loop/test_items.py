"""Which train items each iteration takes: demonstrations first, then fresh slices after each task's own."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from aitp.loop import LoopConfig
from tests.loop.helpers import MINI


def iteration_items(config, iteration):
    return list(config.build_environment(Path(".")).items(iteration))


def _config(**task0) -> LoopConfig:
    data = copy.deepcopy(MINI)
    data["environment"]["tasks"][0].update(task0)
    return LoopConfig.model_validate(data)


def test_a_task_can_take_its_own_number_of_demonstrations():
    config = _config(demonstrations=2)
    arithmetic, legs = (t.name for t in config.environment.tasks)
    demos = iteration_items(config, 0)
    assert [it.task for it in demos].count(arithmetic) == 2 and [it.task for it in demos].count(legs) == 6
    first = iteration_items(config, 1)
    again = iteration_items(_config(demonstrations=2), 1)
    assert [it.item_id for it in first] == [it.item_id for it in again]  # deterministic
    six = [it.item_id for it in iteration_items(_config(demonstrations=6), 0) if it.task == arithmetic]
    # the fresh items of iteration 1 start right after the task's own 2 demonstrations
    assert [it.item_id for it in first if it.task == arithmetic] == six[2:6]
    assert [it.task for it in first].count(arithmetic) == config.environment.rollouts.items_per_task


def test_no_demonstrations_at_all_is_refused_for_a_demonstration_warm_start():
    data = copy.deepcopy(MINI)
    data["environment"]["demonstrations_per_task"] = 0
    with pytest.raises(ValueError, match="no task has demonstrations"):
        LoopConfig.model_validate(data)

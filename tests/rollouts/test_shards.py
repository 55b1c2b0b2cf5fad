"""Shards, sampling seeds and group ids: cut in order, and independent of where a shard runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from aitp.configs import load_config
from aitp.fanout.shards import (
    MAX_GPU_SHARD_SIZE,
    MAX_SHARD_SIZE,
    cut_shards,
    default_shard_size,
    group_id,
    sample_seed,
)
from aitp.loop import LoopConfig


def test_cut_shards_keeps_order_and_sizes():
    shards = cut_shards(list(range(10)), 4)
    assert shards == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert cut_shards([], 3) == []
    with pytest.raises(ValueError):
        cut_shards([1], 0)


def test_default_shard_size_depends_on_item_count_only():
    assert default_shard_size(0) == 1
    assert default_shard_size(8) == 1
    assert default_shard_size(320) == 10
    assert default_shard_size(10**6) == MAX_SHARD_SIZE


def test_gpu_shards_follow_the_cluster_one_per_worker_unless_the_work_is_larger():
    assert default_shard_size(80, gpu_workers=1) == 80  # the case: 80 items were 27 shards of 3
    assert len(cut_shards(list(range(80)), default_shard_size(80, gpu_workers=2))) == 2
    assert len(cut_shards(list(range(81)), default_shard_size(81, gpu_workers=2))) == 2  # 41 + 40
    big = 5 * MAX_GPU_SHARD_SIZE
    assert default_shard_size(big, gpu_workers=2) == MAX_GPU_SHARD_SIZE  # larger work: more shards than workers
    assert default_shard_size(320, gpu_workers=0) == default_shard_size(320) == 10


def test_an_iteration_of_the_gpu_recipe_is_one_shard_on_one_gpu():
    config = load_config(LoopConfig, Path(__file__).resolve().parents[2] / "configs" / "gpu.yaml")
    items = len(config.environment.tasks) * config.environment.rollouts.items_per_task
    assert default_shard_size(items, gpu_workers=1) == items


def test_sample_seed_is_stable_and_spread():
    assert sample_seed("abc", 0, 0) == sample_seed("abc", 0, 0)
    seeds = {sample_seed("abc", s, it) for s in range(5) for it in range(5)}
    assert len(seeds) == 25
    assert all(0 <= s < 2**31 for s in seeds)
    assert sample_seed("abc", 1, 0) != sample_seed("abd", 1, 0)


def test_group_id_names_experiment_iteration_item_and_seed():
    base = group_id("exp", 1, "item", 7)
    assert base == group_id("exp", 1, "item", 7)
    assert len({base, group_id("exp2", 1, "item", 7), group_id("exp", 2, "item", 7), group_id("exp", 1, "x", 7)}) == 4

"""Cutting items into shards, and the seeds and ids that make a shard's result independent of where it runs.

A group's sampling seed is a hash of (item_id, base seed, iteration): never of the worker, the
shard or the batch, so a shard retried elsewhere (or cut differently) samples the same answers.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")

TARGET_SHARDS = 32
MAX_SHARD_SIZE = 64


def cut_shards(items: Sequence[T], shard_size: int) -> list[list[T]]:
    """Consecutive shards of at most `shard_size` items, in order."""
    if shard_size < 1:
        raise ValueError(f"shard_size must be at least 1, got {shard_size}")
    return [list(items[i : i + shard_size]) for i in range(0, len(items), shard_size)]


def default_shard_size(n_items: int) -> int:
    """About 32 shards (at most 64 items each), so a lost worker costs little and stragglers even out.

    It depends on the item count alone, never on the cluster: a batch's log-probs can differ in
    the last bits with its composition, so the same items are cut the same way on any cluster.
    """
    if n_items <= 0:
        return 1
    return max(1, min(MAX_SHARD_SIZE, math.ceil(n_items / TARGET_SHARDS)))


def _hash_int(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "big") & 0x7FFFFFFF


def sample_seed(item_id: str, seed: int, iteration: int) -> int:
    """The sampling seed of an item's group: a 31-bit hash of (item_id, base seed, iteration)."""
    return _hash_int(f"aitp-sample:{item_id}:{seed}:{iteration}")


def group_id(experiment: str, iteration: int, item_id: str, sampling_seed: int) -> str:
    """A stable id of one group of samples: the same inputs give the same id on any machine."""
    digest = hashlib.sha256(f"{experiment}:{iteration}:{item_id}:{sampling_seed}".encode()).hexdigest()
    return digest[:20]

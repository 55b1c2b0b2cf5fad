"""Cutting items into shards, and the seeds and ids that make a shard's result independent of where it runs.

A group's sampling seed is a hash of (item_id, base seed, iteration): never of the worker, the
shard or the batch, so a shard retried elsewhere (or cut differently) samples with the same
randomness. On CPU workers the cut depends on the item count alone. On GPU workers it follows the
cluster (one shard per GPU worker): the decoder streams a shard's groups through memory-sized
slots, so a whole iteration per card keeps every card busy, and bf16 completions already depend
in their last bits on which rows share a step, whatever the cut.
"""

from __future__ import annotations

import hashlib
import math
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

T = TypeVar("T")

TARGET_SHARDS = 32
MAX_SHARD_SIZE = 64
# Items in one GPU shard at most: a lost worker costs at most this rerun (65,536 rows at group size 16,
# seconds of decoding for a 135M model on a GPU). Fewer, larger shards also keep a worker from
# sampling one shard while it sends the last one's rows back (pickling them takes the interpreter
# lock the decoder's host loop needs): cut in two shards, the GPU recipe's calls ran far slower than
# the same calls replayed alone, as one shard much closer to them
# (benchmarks/results/history-rollouts-in-loop.md).
MAX_GPU_SHARD_SIZE = 4096


def cut_shards(items: Sequence[T], shard_size: int) -> list[list[T]]:
    """Consecutive shards of at most `shard_size` items, in order."""
    if shard_size < 1:
        raise ValueError(f"shard_size must be at least 1, got {shard_size}")
    return [list(items[i : i + shard_size]) for i in range(0, len(items), shard_size)]


def default_shard_size(n_items: int, gpu_workers: int = 0) -> int:
    """Items per shard: one shard per GPU worker (up to 1,024 items each), else about 32 of at most 64.

    On CPU workers, many small shards let a lost worker cost little and stragglers even out, and
    the cut depends on the item count alone (float32 completions then never depend on the cluster).
    """
    if n_items <= 0:
        return 1
    if gpu_workers > 0:
        return max(1, min(MAX_GPU_SHARD_SIZE, math.ceil(n_items / gpu_workers)))
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


@contextmanager
def shard_tasks(
    client: Any,
    fn: Callable[..., Any],
    shards: Sequence[Sequence[Any]],
    *args: Any,
    name: str,
    retries: int,
    resources: dict[str, int] | None = None,
) -> Iterator[Iterator[tuple[int, Any]]]:
    """Submit `fn(shard, *args)` as one Dask task per shard; yield (shard index, future) as each finishes.

    The one fan-out rollouts and proof searches share. One submit per shard under its own key (`map` would
    tokenize every item of every shard, a cost that grows with the work and buys nothing with explicit keys);
    a task is retried `retries` times when its worker dies; what is left is cancelled when the block exits,
    on an error too.
    """
    from distributed import as_completed

    run_id = uuid.uuid4().hex[:12]
    futures = [
        client.submit(fn, shard, *args, key=f"aitp-{name}-{run_id}-{i}", retries=retries, resources=resources)
        for i, shard in enumerate(shards)
    ]
    index = {future.key: i for i, future in enumerate(futures)}
    try:
        yield ((index[future.key], future) for future in as_completed(futures, loop=client.loop))
    finally:
        client.cancel(futures)

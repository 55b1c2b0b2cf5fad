"""What runs on a Dask worker: load the policy once per process, then sample and score a shard.

The policy is cached per worker process, keyed by its spec and device, so every shard after the
first reuses the loaded model; `PolicyPlugin` can warm that cache when a worker joins. A shard
returns plain, small rows (one per sample), sent back as one object (`ShardRows`); the caller
writes them out. For the loop a shard comes back ready to commit instead (`lake_shard_task`): shaped,
filtered and encoded here, so the flow's process does none of that per-row work.
"""

from __future__ import annotations

import gc
import hashlib
import json
import os
import socket
import sys
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dask.sizeof import sizeof
from distributed import get_worker
from distributed.diagnostics.plugin import WorkerPlugin

from aitp.fanout.cluster import wants_cuda
from aitp.fanout.shards import group_id, sample_seed
from aitp.policies.base import Completion, Messages, Policy, Preparable, SamplingParams
from aitp.policies.spec import PolicySpec
from aitp.reasoning.filtering import filter_rows
from aitp.reasoning.groups import ScoredGroup, score_group
from aitp.reasoning.items import Item
from aitp.reasoning.prompt import SYSTEM_PROMPT, build_messages
from aitp.tokenizer import load_token_counter

if TYPE_CHECKING:
    import pyarrow as pa

MAX_CACHED_POLICIES = 2  # e.g. champion and challenger; iterations would otherwise pile up models
_POLICIES: dict[str, Policy] = {}
_LOCK = threading.Lock()


@dataclass(frozen=True)
class RolloutContext:
    """What every shard of one rollout shares: where rows belong and how to sample and score."""

    experiment: str
    iteration: int
    seed: int
    params: SamplingParams
    max_token_length: int
    device: str | None = None
    system_prompt: str | None = None
    """None: the environment's system prompt."""
    gpu_memory_share: float | None = None
    """The share of its card a GPU worker's decoder may hold (None: nearly all that is free)."""


@dataclass(frozen=True)
class ShardRows:
    """A shard's rows as the Dask task's result: one object, pickled whole on its way to the flow.

    Dask sends a plain list of dicts item by item: fetching the rows of an iteration of the GPU recipe
    from a worker process took many times as long as the same rows in one object
    (`benchmarks/results/history-shard-rows.md`). Pickled whole, the rows of a group also keep sharing
    one prompt object, which the lake then encodes once.
    """

    rows: list[dict[str, Any]]


@sizeof.register(ShardRows)
def _sizeof_shard_rows(shard: ShardRows) -> int:
    """What the rows weigh, so that the worker's memory accounting sees them."""
    return sizeof(shard.rows)


def spec_key(spec: PolicySpec | str | dict[str, Any], device: str | None) -> str:
    """The per-process cache key: the spec, the device, and the identity of the checkpoint on disk.

    Checkpoints are replaced by renaming a new directory into place, so the path's inode and mtime
    tell a retrained checkpoint at the same path from the cached one.
    """
    spec = PolicySpec.parse(spec)
    path = spec.local_path() if spec.path else None
    stamp = None
    if path:
        try:
            st = os.stat(path)
            stamp = [st.st_ino, st.st_mtime_ns]
        except OSError:
            stamp = None
    return json.dumps({"spec": spec.model_dump(mode="json"), "device": device, "stamp": stamp}, sort_keys=True)


def _current_worker() -> Any:
    """The Dask worker running this code, or None outside one."""
    try:
        return get_worker()
    except ValueError:  # not in a Dask worker
        return None


def load_cached_policy(spec: PolicySpec | str | dict[str, Any], device: str | None = None) -> Policy:
    """The policy of `spec`, loaded at most once per process (the last few are kept, oldest evicted)."""
    key = spec_key(spec, device)
    with _LOCK:
        policy = _POLICIES.pop(key, None)
        if policy is None:
            threads = os.environ.get("OMP_NUM_THREADS")
            if threads and threads.isdigit() and _current_worker() is not None:
                # Each worker owns its share of the cores (the nanny sets OMP_NUM_THREADS=1); enforce it
                # even if torch was imported before the variable was set.
                import torch

                torch.set_num_threads(max(1, int(threads)))
            if wants_cuda(device):
                stop_worker_profiler()
            from aitp.policies.loading import load_policy

            policy = load_policy(spec, device=device)
        _POLICIES[key] = policy  # most recently used last
        while len(_POLICIES) > MAX_CACHED_POLICIES:
            _POLICIES.pop(next(iter(_POLICIES)))
        return policy


def stop_worker_profiler() -> bool:
    """Stop this Dask worker's statistical profiler, if it runs one; whether one was asked to stop.

    Every 10 ms (Dask's default) the worker's event loop takes the interpreter lock and walks the
    stack of each running task. On a GPU worker that task is a host loop feeding the decoder: prefill
    passes, first tokens and row bookkeeping between blocks of captured steps, where every stall
    leaves the card idle. A profile of in-loop calls showed the event loop and the profiler active
    throughout them (`benchmarks/results/history-rollouts-in-loop.md`). The profiler only feeds the
    dashboard's profile page. The stop is queued on the worker's event loop, its own thread.
    """
    worker = _current_worker()
    if worker is None:
        return False
    callbacks = [worker.periodic_callbacks.get(name) for name in ("profile", "profile-cycle")]
    running = [pc for pc in callbacks if pc is not None and pc.is_running()]
    for pc in running:
        worker.loop.add_callback(pc.stop)
    return bool(running)


def worker_name() -> str:
    """This worker's name as Dask knows it, else host:pid outside Dask."""
    worker = _current_worker()
    return f"{socket.gethostname()}:{os.getpid()}" if worker is None else str(worker.name)


class PolicyPlugin(WorkerPlugin):
    """A Dask worker plugin that loads the policy when a worker starts (optional: shards load lazily)."""

    def __init__(self, spec: PolicySpec, device: str | None = None) -> None:
        self.spec, self.device = spec, device
        self.name = "aitp-policy-" + hashlib.sha256(spec_key(spec, device).encode()).hexdigest()[:12]

    def setup(self, worker) -> None:
        load_cached_policy(self.spec, self.device)


WARM_PROMPT = [{"role": "user", "content": "What is 2 + 2?"}]
WARM_PROMPTS = 4


def limit_memory_share(share: float | None) -> None:
    """Cap this worker's decoder engines at a share of their card (None lifts a cap an earlier run set).

    The fast decoder (and so torch) is imported only to set a cap or lift one it already holds: a CPU
    worker stays free of CUDA.
    """
    if share is not None or "aitp.policies.fast.engine" in sys.modules:
        from aitp.policies.fast.engine import limit_memory_share as limit

        limit(share)


def warm_decoder(spec: PolicySpec, device: str | None, params: SamplingParams, system_prompt: str | None) -> float:
    """Load the policy and sample a few rows once, so that the first shard finds its decoder compiled; seconds taken.

    On CUDA the first call in a process compiles the decoder's pieces (tens of seconds); their code
    serves every later checkpoint of the architecture and every batch size, so a worker that does
    this while the loop trains its first model starts its first shard warm.
    """
    start = time.perf_counter()
    policy = load_cached_policy(spec, device)
    system = SYSTEM_PROMPT if system_prompt is None else system_prompt
    chat = [{"role": "system", "content": system}, *WARM_PROMPT]
    policy.sample([chat] * WARM_PROMPTS, params, list(range(WARM_PROMPTS)))
    # What lives now lives as long as the worker (libraries, compiled code, the decoder). Python's full
    # collections, started whenever enough objects have survived (a shard's rows do), walk all of it:
    # the likely cause of the stalls seen inside rollout calls on the GPU worker. Frozen, it is
    # walked no more. A policy holds no reference cycle, so one evicted from the cache is still freed
    # by reference counting.
    gc.collect()
    gc.freeze()
    return time.perf_counter() - start


def prepare_decoder(
    spec: PolicySpec,
    device: str | None,
    params: SamplingParams,
    prompts: list[Messages],
    rows: int,
    gpu_memory_share: float | None = None,
) -> dict[str, float | int] | None:
    """Load the policy and ready its decoder for a shard of `rows` rows over these chats; what it built.

    The loop sends this for its next iteration as it closes the current one: the decoder's engine
    (slots sized to the memory then free, every step captured) is then built while the loop writes
    its records and opens the next iteration, instead of inside that iteration's first shard. Only
    the engine's shape matters, and it is shared by every checkpoint of the architecture, so any of
    them will do.
    """
    limit_memory_share(gpu_memory_share)
    policy = load_cached_policy(spec, device)
    return policy.prepare(prompts, params, rows) if isinstance(policy, Preparable) else None


def release_decoders() -> dict[str, float]:
    """Drop this process's decoder engines and give their GPU memory back; what that did.

    The loop sends this to its GPU workers before it trains: on a card a worker shares with the
    training, the engine (slots sized to nearly all the memory free when it was built) would leave
    the training too little. The next iteration's engine is built again once the trained model is
    judged (`prepare_decoder`); the decoder's compiled code and the model's private copy stay.

    The answer says how many engines went, the GiB the card gained, and the GiB this process still
    has in live tensors and in PyTorch's reserve. A gpu.yaml worker once kept most of the card reserved,
    little of it live, after every release: the allocator's fixed-size segments, pinned by small
    tensors, which is why the loop's GPU workers run with expandable segments (`gpu_allocator_settings`).
    """
    import torch

    from aitp.policies.fast.resident import release_engines, resident_engines

    held = len(resident_engines())
    cuda = torch.cuda if torch.cuda.is_initialized() else None
    before = cuda.mem_get_info()[0] if cuda else 0
    release_engines()
    gc.collect()  # an engine held only by a reference cycle would otherwise keep its cache until a full collection
    report = {"engines": float(held)}
    if cuda:
        cuda.empty_cache()
        report |= {
            "freed_gib": (cuda.mem_get_info()[0] - before) / 2**30,
            "allocated_gib": cuda.memory_allocated() / 2**30,
            "reserved_gib": cuda.memory_reserved() / 2**30,
        }
    return report


def rollout_shard(item_dicts: list[dict[str, Any]], spec: PolicySpec, ctx: RolloutContext) -> list[dict[str, Any]]:
    """Sample a group for each item of a shard, score it, and return one row per sample."""
    limit_memory_share(ctx.gpu_memory_share)
    policy = load_cached_policy(spec, ctx.device)
    items = [Item.from_dict(d) for d in item_dicts]
    system = SYSTEM_PROMPT if ctx.system_prompt is None else ctx.system_prompt
    prompts = [build_messages(item, system) for item in items]
    seeds = [sample_seed(item.item_id, ctx.seed, ctx.iteration) for item in items]
    start = time.perf_counter()
    groups = policy.sample(prompts, ctx.params, seeds)
    latency = (time.perf_counter() - start) / max(1, len(items))
    count_tokens = load_token_counter(None)
    where = {
        "worker": worker_name(),
        "model_version": str(getattr(policy, "version", "")),
        "sampler_json": getattr(policy, "last_call", None),  # one dict for the shard's rows: stored once
    }
    rows: list[dict[str, Any]] = []
    for item, prompt, seed, group in zip(items, prompts, seeds, groups):
        lengths = [c.completion_tokens for c in group]
        scored = score_group(item, [c.text for c in group], ctx.max_token_length, count_tokens, lengths)
        rows += _group_rows(ctx, item, prompt, seed, group, scored, latency, where)
    return rows


def rollout_shard_task(item_dicts: list[dict[str, Any]], spec: PolicySpec, ctx: RolloutContext) -> ShardRows:
    """`rollout_shard` as a Dask task: its rows in one object (see `ShardRows`)."""
    return ShardRows(rollout_shard(item_dicts, spec, ctx))


def lake_rollout_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Shard rows in the lake's `rollouts` schema."""
    out = []
    for row in rows:
        row = {k: v for k, v in row.items() if k not in ("sample_seed", "experiment", "iteration")}
        row["config_json"] = row.pop("config", None)
        out.append(row)
    return out


def lake_shard_task(
    item_dicts: list[dict[str, Any]], spec: PolicySpec, ctx: RolloutContext, threshold: float
) -> pa.Table:
    """`rollout_shard` as a Dask task whose result is ready to commit: the lake's `rollouts` table of the shard,
    each group kept or dropped at `threshold` (a group's samples are all in one shard).

    Shaping, filtering and encoding are Python work for every row. Here they run on the worker, beside
    the sampling; in the flow's process they would hold its interpreter lock, which with
    `rollouts.overlap` the training running there needs to launch its kernels
    (`benchmarks/results/2026-11-29-flow-share.md`). The table travels as Arrow buffers.
    """
    return lake_table(rollout_shard(item_dicts, spec, ctx), threshold)


def lake_table(rows: list[dict[str, Any]], threshold: float) -> pa.Table:
    """Shard rows as the lake's `rollouts` table, each group kept or dropped at `threshold`."""
    from aitp.lake.schemas import rows_to_table

    return rows_to_table("rollouts", filter_rows(lake_rollout_rows(rows), threshold))


def _group_rows(
    ctx: RolloutContext,
    item: Item,
    prompt: Messages,
    seed: int,
    group: list[Completion],
    scored: ScoredGroup,
    latency: float,
    where: dict[str, str],
) -> list[dict[str, Any]]:
    """The rows of one scored group: the fields the lake's rollouts table stores."""
    item_id = item.item_id  # a hash of the identity: once per group, not once per sample
    gid = group_id(ctx.experiment, ctx.iteration, item_id, seed)
    return [
        {
            "experiment": ctx.experiment,
            "iteration": ctx.iteration,
            "item_id": item_id,
            "task": item.task,
            "config": item.config,
            "seed": item.seed,
            "item_index": item.index,
            "split": item.split,
            "difficulty_level": item.level,
            "gold_answer": item.answer,
            "group_id": gid,
            "sample_index": k,
            "sample_seed": seed,
            "prompt": prompt,
            "completion": c.text,
            "extracted_answer": scored.extracted_answers[k],
            "raw_score": scored.raw_scores[k],
            "lenient_score": scored.lenient_scores[k],
            "final_score": scored.scores[k],
            "format_error": scored.format_errors[k],
            "prompt_tokens": c.prompt_tokens,
            "completion_tokens": c.completion_tokens,
            "token_logprobs": list(c.logprobs),
            "token_ids": list(c.token_ids),
            "finish_reason": c.finish_reason,
            "latency_s": float(c.extra.get("latency_s", latency)),
            **where,
        }
        for k, c in enumerate(group)
    ]

"""Rollouts fanned out over Dask: cut items into shards, sample and score each on a worker, gather rows.

A shard is the unit of retry: a worker that dies mid-shard costs a rerun of that shard elsewhere,
and since sampling is seeded per item (never per worker) the rerun gives the same rows as a
fault-free run, up to `latency_s` and `worker`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from typing import Any

from aitp.errors import AitpError
from aitp.fanout.cluster import (
    EXPANDABLE_SEGMENTS,
    GPU,
    NoGpuWorkersError,
    dask_client,
    gpu_worker_addresses,
    gpu_workers,
    wants_cuda,
)
from aitp.fanout.shards import cut_shards, default_shard_size, shard_tasks
from aitp.policies.base import SamplingParams
from aitp.policies.spec import PolicySpec
from aitp.reasoning.items import Item
from aitp.reasoning.prompt import SYSTEM_PROMPT, build_messages
from aitp.reasoning.rollouts.worker import (
    RolloutContext,
    prepare_decoder,
    release_decoders,
    rollout_shard_task,
    warm_decoder,
)

Progress = Callable[[int, int], None]
DEFAULT_RETRIES = 2
RELEASE_TIMEOUT_S = 120.0  # a release waits for its worker's running shard; the loop trains after it either way
PINNED_RESERVE_GIB = 4.0  # free memory a released worker may keep in PyTorch's reserve before the log line says why


class PolicyNotFoundError(AitpError):
    """A policy spec that names a path that does not exist."""


class RolloutClusterError(AitpError):
    """A shard that kept killing its workers, or a scheduler lost mid-run."""


def preflight(spec: PolicySpec) -> None:
    """Fail fast on the caller's side: a missing policy path, a server that does not answer."""
    path = spec.local_path()
    if path is not None and not path.exists():
        raise PolicyNotFoundError(
            f"policy path {path} does not exist: pass a checkpoint directory, or tiny, hf or openai with their options"
        )
    if path is not None and not spec.backend:
        from aitp.policies.loading import backend_of

        backend_of(path)  # a directory that is no checkpoint fails here, not in every worker
    if spec.is_remote:
        from aitp.policies.openai_backend import OpenAIPolicy

        OpenAIPolicy.from_spec(spec.openai_options()).check()


def local_gpus(spec: PolicySpec, device: str | None) -> int | None:
    """GPUs for a local cluster: none for a server or a CPU policy, else whatever CUDA shows (None)."""
    return 0 if spec.is_remote or device == "cpu" else None


def _placement(spec: PolicySpec, client, device: str | None) -> tuple[str | None, dict[str, int] | None]:
    """The device to load on and the Dask resources to ask for: a GPU only when the policy runs on CUDA."""
    if spec.is_remote or device == "cpu":
        return device, None
    n_gpu = gpu_workers(client)
    if device is not None and device.startswith("cuda"):
        if n_gpu == 0:
            raise NoGpuWorkersError(
                "the policy is to run on CUDA but no Dask worker declares a GPU: start workers with "
                "`--resources GPU=1`, or pass device cpu"
            )
        return device, {GPU: 1}
    if device is None and n_gpu > 0:
        return "cuda", {GPU: 1}
    return device, None


def warm_gpu_workers(
    client: Any, policy: PolicySpec, params: SamplingParams, device: str | None, system_prompt: str | None = None
) -> list[Any]:
    """Have every GPU worker load `policy` and compile its decoder now, in the background; the futures.

    Each task holds its worker's GPU resource, so a shard sent meanwhile waits for it rather than
    compiling the same code beside it. A CPU or remote policy needs no warming (none is sent).
    """
    if not _samples_on_gpu(policy, device):
        return []
    return _to_gpu_workers(client, gpu_worker_addresses(client), policy, device, warm_decoder, params, system_prompt)


def prepare_gpu_workers(
    client: Any,
    items: Sequence[Item],
    policy: PolicySpec,
    params: SamplingParams,
    device: str | None,
    system_prompt: str | None = None,
    shard_size: int | None = None,
    gpu_memory_share: float | None = None,
) -> list[Any]:
    """Have every GPU worker build, in the background, the decoder engine a rollout over `items` will need.

    Each worker is told the rows of the largest shard `run_rollouts` would cut and every item's
    prompt (the engine's width is set by the longest), so whichever shard it is given fits the
    engine it built. A CPU or remote policy builds nothing (none is sent).
    """
    if not items or not _samples_on_gpu(policy, device):
        return []
    gpus = gpu_worker_addresses(client)
    size = shard_size or default_shard_size(len(items), gpu_workers=len(gpus))
    system = SYSTEM_PROMPT if system_prompt is None else system_prompt
    prompts = [build_messages(item, system) for item in items]
    rows = min(size, len(items)) * params.n
    return _to_gpu_workers(client, gpus, policy, device, prepare_decoder, params, prompts, rows, gpu_memory_share)


def release_gpu_workers(client: Any, timeout_s: float = RELEASE_TIMEOUT_S) -> list[dict[str, float]]:
    """Have every GPU worker drop its decoder engines, and wait until they have; each one's report.

    Each release holds its worker's GPU resource, so it runs once the worker's running task is done.
    The loop calls this before it trains, so that a training that shares a card with a worker finds
    the card's memory free. A worker that has not answered within `timeout_s` is left as it is (and
    has no report); the reports are `release_decoders`'s.
    """
    futures = [
        client.submit(release_decoders, workers=[addr], resources={GPU: 1}, pure=False)
        for addr in gpu_worker_addresses(client)
    ]
    deadline, reports = time.monotonic() + timeout_s, []
    for future in futures:
        try:
            reports.append(future.result(timeout=max(0.01, deadline - time.monotonic())))  # 0 would mean none
        except TimeoutError:  # a worker still busy: the training goes ahead beside it
            pass
    return reports


def describe_release(reports: list[dict[str, float]]) -> str:
    """One line for the loop's log: engines dropped, GiB the cards gained, GiB the workers still hold."""
    engines = int(sum(r["engines"] for r in reports))
    text = f"released {engines} decoder engine(s) on {len(reports)} GPU worker(s)"
    on_cuda = [r for r in reports if "freed_gib" in r]
    if on_cuda:
        freed = sum(r["freed_gib"] for r in on_cuda)
        allocated = sum(r["allocated_gib"] for r in on_cuda)
        reserved = sum(r["reserved_gib"] for r in on_cuda)
        text += f": {freed:.1f} GiB back; still held: {allocated:.1f} GiB in tensors, {reserved:.1f} GiB reserved"
        if reserved - allocated > PINNED_RESERVE_GIB:  # fixed-size segments pinned by small live tensors
            text += (
                f" ({reserved - allocated:.1f} GiB free but kept from the card: start GPU workers with "
                f"PYTORCH_CUDA_ALLOC_CONF={EXPANDABLE_SEGMENTS})"
            )
    return text


def _samples_on_gpu(policy: PolicySpec, device: str | None) -> bool:
    """Whether the policy samples on the workers' GPUs (not on a server, not on CPU)."""
    return not PolicySpec.parse(policy).is_remote and wants_cuda(device)


def _to_gpu_workers(
    client: Any, gpus: list[str], policy: PolicySpec, device: str | None, fn: Callable, *args: Any
) -> list[Any]:
    """Run `fn(policy, device, *args)` once on each of the GPU workers `gpus`, holding its GPU, fire-and-forget."""
    from distributed import fire_and_forget

    policy = PolicySpec.parse(policy)
    futures = [
        client.submit(fn, policy, device, *args, workers=[addr], resources={GPU: 1}, pure=False) for addr in gpus
    ]
    for future in futures:
        fire_and_forget(future)
    return futures


def run_rollouts(
    items: Sequence[Item], policy: PolicySpec, params: SamplingParams, client: Any = None, **options: Any
) -> list[dict[str, Any]]:
    """Sample and score a group of `params.n` completions per item on Dask; one row per sample, in item order.

    `options`: those of `fan_out_shards`.
    """
    shards = fan_out_shards(rollout_shard_task, (), items, policy, params, client, **options)
    return [row for shard in shards for row in shard.rows]


def fan_out_shards(
    task: Callable[..., Any],
    task_args: tuple[Any, ...],
    items: Sequence[Item],
    policy: PolicySpec,
    params: SamplingParams,
    client: Any = None,
    *,
    experiment: str = "default",
    iteration: int = 0,
    seed: int = 0,
    max_token_length: int | None = None,
    shard_size: int | None = None,
    retries: int = DEFAULT_RETRIES,
    device: str | None = None,
    workers: int | None = None,
    on_progress: Progress | None = None,
    system_prompt: str | None = None,
    gpu_memory_share: float | None = None,
) -> list[Any]:
    """`task(shard, policy, context, *task_args)` for each shard of `items` on Dask; the results in shard order.

    `task` is `rollout_shard_task` (rows) or `lake_shard_task` (a table ready to commit). `client` is a
    `distributed.Client`, a scheduler address, or None for a local cluster of `workers` processes started
    (and closed) for this call. `max_token_length` (default `params.max_tokens`) sets the length penalty.
    `on_progress(items_done, items_total)` is called as shards finish. `system_prompt` replaces the
    environment's (short prompts matter for small byte-level models). `gpu_memory_share` caps the share of
    its card a GPU worker's decoder may hold.
    """
    if not items:
        return []
    policy = PolicySpec.parse(policy)
    preflight(policy)
    if isinstance(client, str) or client is None:
        opened = dask_client(client, workers, gpus=local_gpus(policy, device))
    else:
        opened = nullcontext(client)
    with opened as dask:
        load_on, resources = _placement(policy, dask, device)
        ctx = RolloutContext(
            experiment=experiment,
            iteration=iteration,
            seed=seed,
            params=params,
            max_token_length=max_token_length or params.max_tokens,
            device=load_on,
            system_prompt=system_prompt,
            gpu_memory_share=gpu_memory_share,
        )
        gpus = gpu_workers(dask) if resources else 0
        size = shard_size or default_shard_size(len(items), gpu_workers=gpus)
        shards = cut_shards([item.to_dict() for item in items], size)
        return _gather(dask, task, task_args, shards, policy, ctx, retries, resources, len(items), on_progress)


def _gather(dask, task, task_args, shards, policy, ctx, retries, resources, total, on_progress) -> list[Any]:
    from distributed import KilledWorker
    from distributed.comm import CommClosedError

    results: list[Any] = [None] * len(shards)
    done = 0
    try:
        with shard_tasks(
            dask, task, shards, policy, ctx, *task_args, name="rollout", retries=retries, resources=resources
        ) as finished:
            for i, future in finished:
                try:
                    results[i] = future.result()
                except KilledWorker as exc:
                    raise RolloutClusterError(
                        f"shard {i} ({len(shards[i])} items) took down every worker that ran it: give workers more "
                        "memory, or lower --shard-size or --max-tokens"
                    ) from exc
                done += len(shards[i])
                if on_progress is not None:
                    on_progress(done, total)
    except CommClosedError as exc:
        raise RolloutClusterError(
            f"lost the Dask scheduler mid-run ({type(exc).__name__}): check that it is still up, then run again"
        ) from exc
    return results


def group_records(items: Sequence[Item], rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One line per item, as `aitp score` writes it (item fields plus scores), with the completions."""
    by_item: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_item.setdefault(row["item_id"], []).append(row)
    records = []
    for item in items:
        group = sorted(by_item.get(item.item_id, []), key=lambda r: r["sample_index"])
        if not group:
            continue
        first = group[0]
        records.append(
            {
                **item.to_dict(),
                "experiment": first["experiment"],
                "iteration": first["iteration"],
                "group_id": first["group_id"],
                "sample_seed": first["sample_seed"],
                "model_version": first["model_version"],
                "completions": [r["completion"] for r in group],
                "scores": [r["final_score"] for r in group],
                "raw_scores": [r["raw_score"] for r in group],
                "lenient_scores": [r["lenient_score"] for r in group],
                "format_errors": [r["format_error"] for r in group],
                "extracted_answers": [r["extracted_answer"] for r in group],
                "completion_tokens": [r["completion_tokens"] for r in group],
                "finish_reasons": [r["finish_reason"] for r in group],
                "uniform": len({r["final_score"] for r in group}) <= 1,
            }
        )
    return records

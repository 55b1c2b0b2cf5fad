"""Prefect tasks over the loop's stages: one task run per stage (rollouts: per committed chunk).

Thin on purpose: each wraps one `aitp.loop.stages` call and adds only what Prefect owns (names,
retries, no caching of inputs). Results are small (counts, paths, version numbers, decisions);
rows travel through the lake. Retries go where a second try can succeed: rollouts (a lost worker
or scheduler), registry calls (a busy MLflow server). Training is not retried: a failed fit fails
the same way again, and resume covers crashes.
"""

from __future__ import annotations

from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE

from aitp.loop import stages

_common: dict[str, Any] = {"cache_policy": NO_CACHE, "persist_result": False}

commit_items = task(stages.commit_items, name="items", retries=1, **_common)
rollout_chunk = task(stages.run_chunk, name="rollouts", retries=2, retry_delay_seconds=5, **_common)
train = task(stages.train_stage, name="train", **_common)
register = task(stages.register_stage, name="register", retries=3, retry_delay_seconds=3, **_common)
evaluate = task(stages.eval_stage, name="eval", retries=1, **_common)
promote = task(stages.promote_stage, name="promote", retries=2, retry_delay_seconds=3, **_common)
plot = task(stages.log_plot, name="plot", retries=1, **_common)

STAGE_TASKS = {
    "items": commit_items,
    "rollouts": rollout_chunk,
    "train": train,
    "register": register,
    "eval": evaluate,
    "promote": promote,
    "plot": plot,
}


def call_as_task(name: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
    """The loop's caller under Prefect: stage `name` (e.g. `rollouts-chunk-0001`) runs as its task."""
    kind = name.split("-", 1)[0]
    prefect_task = STAGE_TASKS.get(kind)
    if prefect_task is None:
        return fn(*args, **kwargs)
    return prefect_task.with_options(task_run_name=name)(*args, **kwargs)

"""Prefect tasks over the loop's stages: one task run per stage (acting: per committed chunk).

Thin on purpose: each wraps one `aitp.loop.stages` function and adds only what Prefect owns (names,
retries, no caching of inputs). Results are small (counts, paths, version numbers, decisions);
rows travel through the lake. Retries go where a second try can succeed: acting (a lost worker
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
act_on_chunk = task(
    stages.act_on_chunk,
    name="rollouts",
    task_run_name="rollouts-chunk-{index:04d}",
    retries=2,
    retry_delay_seconds=5,
    **_common,
)
train = task(stages.train_stage, name="train", **_common)
register = task(stages.register_stage, name="register", retries=3, retry_delay_seconds=3, **_common)
evaluate = task(stages.eval_stage, name="eval", retries=1, **_common)
promote = task(stages.promote_stage, name="promote", retries=2, retry_delay_seconds=3, **_common)
plot = task(stages.log_plot, name="plot", retries=1, **_common)

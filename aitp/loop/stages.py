"""The stages of one iteration, each committed to the lake (or the registry) and skipped once committed.

An iteration k is: items -> rollouts (in chunks) -> train -> register -> eval -> promote -> finish.
Every stage first looks for its own committed output, so a run killed anywhere and started again
continues at the first stage that is not committed, reusing what is (no duplicate rows, no
repeated training). Stages hand each other nothing in memory but small summaries: what a stage
needs it reads back from the lake, the checkpoint directory or the registry.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any

from aitp.envs.items import Item, generate_items
from aitp.errors import AitpError
from aitp.loop.config import LoopConfig

ITEMS_SHARD = "train"
Progress = Callable[[int, int], None]


class ExperimentConfigError(AitpError):
    """An experiment started again with a config other than the one it ran with."""


def code_version() -> str:
    """aitp's version plus the git commit of the checkout it runs from (`+dirty` with local changes)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        base = version("aitp")
    except PackageNotFoundError:
        base = "0"
    root = Path(__file__).resolve().parents[2]
    try:
        commit = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short=10", "HEAD"], capture_output=True, text=True, timeout=5
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=5,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return base
    return f"{base}+g{commit}{'.dirty' if dirty else ''}" if commit else base


@dataclass
class LoopRun:
    """One experiment under one home: its config, hash and code version, and the registry."""

    home: Path
    config: LoopConfig
    config_hash: str
    code_version: str = field(default_factory=code_version)
    tracking_uri: str | None = None

    @property
    def experiment(self) -> str:
        return self.config.experiment

    @cached_property
    def registry(self):
        from aitp.registry import Registry

        return Registry(self.home, self.tracking_uri)

    @property
    def version(self) -> str:
        """The flow runs' version: code version plus config hash."""
        return f"{self.code_version}-{self.config_hash[:12]}"

    def flow_run_name(self, iteration: int) -> str:
        return f"{self.experiment}-iter-{iteration:03d}"


# -- items ------------------------------------------------------------------------------------


def iteration_items(config: LoopConfig, iteration: int) -> list[Item]:
    """The train items of an iteration: the demonstrations at 0, then fresh slices (or the same ones).

    Cached per (config, iteration): generating thousands of items while skipping the eval questions takes
    seconds, and the stages of one iteration ask for them several times.
    """
    return list(_iteration_items(config.model_dump_json(), iteration))


@lru_cache(maxsize=8)
def _iteration_items(config_json: str, iteration: int) -> tuple[Item, ...]:
    config = LoopConfig.model_validate_json(config_json)
    per_iter = config.rollouts.items_per_task
    items = []
    for task in config.tasks:
        demos = config.demonstrations(task.name)
        if iteration == 0:
            start, n = 0, demos if demos else per_iter
        elif config.rollouts.fresh_items:
            start, n = demos + (iteration - 1) * per_iter, per_iter
        else:
            start, n = 0, per_iter
        made = generate_items(
            task.name, start + n, config.seed, "train", eval_size=config.eval.n_per_task, task_config=task.config
        )
        items += made[start : start + n]
    return tuple(items)


def commit_items(run: LoopRun, iteration: int) -> int:
    """Commit the iteration's train items to the `items` table (the demonstrations read them back)."""
    from aitp.evaluate import item_row
    from aitp.lake import commits, write_partition

    done = [c for c in commits(run.home, "items", run.experiment, iteration) if c.shard == ITEMS_SHARD]
    if done:
        return done[0].rows
    rows = [item_row(it) for it in iteration_items(run.config, iteration)]
    write_partition(run.home, "items", run.experiment, iteration, rows, shard=ITEMS_SHARD)
    return len(rows)


# -- rollouts ---------------------------------------------------------------------------------


def chunk_name(index: int) -> str:
    return f"chunk-{index:04d}"


def rollout_chunks(config: LoopConfig, iteration: int) -> list[list[Item]]:
    """The iteration's items cut into committed chunks (the unit of resume)."""
    items = iteration_items(config, iteration)
    size = config.rollouts.chunk_items
    return [items[i : i + size] for i in range(0, len(items), size)]


def pending_chunks(run: LoopRun, iteration: int) -> list[int]:
    """Indices of the iteration's rollout chunks that are not committed yet."""
    from aitp.lake import committed_shards

    done = set(committed_shards(run.home, "rollouts", run.experiment, iteration))
    return [i for i in range(len(rollout_chunks(run.config, iteration))) if chunk_name(i) not in done]


def lake_rollout_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rollout worker rows in the lake's `rollouts` schema."""
    out = []
    for row in rows:
        row = {k: v for k, v in row.items() if k not in ("sample_seed", "experiment", "iteration")}
        row["config_json"] = row.pop("config", None)
        out.append(row)
    return out


def run_chunk(
    run: LoopRun,
    iteration: int,
    index: int,
    policy: str | dict[str, Any],
    client: Any = None,
    on_progress: Progress | None = None,
) -> int:
    """Sample, score and filter one chunk of groups with the policy on Dask; commit it; return its rows."""
    from aitp.filtering import filter_rows
    from aitp.lake import commits, write_partition
    from aitp.policies.base import SamplingParams
    from aitp.rollouts.run import run_rollouts

    shard = chunk_name(index)
    done = [c for c in commits(run.home, "rollouts", run.experiment, iteration) if c.shard == shard]
    if done:
        return done[0].rows
    cfg = run.config.rollouts
    items = rollout_chunks(run.config, iteration)[index]
    params = SamplingParams(temperature=cfg.temperature, top_p=cfg.top_p, max_tokens=cfg.max_tokens)
    rows = run_rollouts(
        items,
        policy,
        params,
        cfg.group_size,
        client,
        experiment=run.experiment,
        iteration=iteration,
        seed=run.config.seed,
        shard_size=cfg.shard_size,
        device=run.config.device,
        workers=cfg.workers,
        on_progress=on_progress,
        system_prompt=run.config.system_prompt,
    )
    rows = filter_rows(lake_rollout_rows(rows), cfg.threshold)
    write_partition(run.home, "rollouts", run.experiment, iteration, rows, shard=shard)
    return len(rows)


def rollout_summary(run: LoopRun, iteration: int) -> dict[str, Any]:
    """Groups, kept groups, kept-group rate and mean score of an iteration's committed rollouts."""
    from aitp.lake import connect

    con = connect(run.home)
    try:
        row = con.execute(
            """SELECT count(DISTINCT group_id), count(DISTINCT group_id) FILTER (WHERE group_kept),
                      avg(final_score), avg(CASE WHEN raw_score >= 1 THEN 1.0 ELSE 0.0 END), count(*)
               FROM rollouts WHERE experiment = $e AND iteration = $k""",
            {"e": run.experiment, "k": iteration},
        ).fetchone()
    finally:
        con.close()
    groups, kept, mean_score, pass_rate, samples = row
    return {
        "groups": groups or 0,
        "kept_groups": kept or 0,
        "kept_group_rate": (kept / groups) if groups else None,
        "mean_score": mean_score,
        "sample_pass_rate": pass_rate,
        "samples": samples or 0,
    }


# -- models -----------------------------------------------------------------------------------


def starting_policy(run: LoopRun, iteration: int) -> str | dict[str, Any]:
    """The model an iteration starts from: the champion's checkpoint, or the configured policy at first."""
    champion = run.registry.get(run.experiment, "champion")
    if champion is None:
        return run.config.policy
    return str(run.registry.checkpoint_path(champion))


def model_id(policy: str | dict[str, Any]) -> str:
    """A short identity of a policy spec for the lake (a checkpoint's fingerprint, else the spec)."""
    from aitp.policies.tiny.checkpoint import fingerprint

    if isinstance(policy, str) and Path(policy).is_dir():
        return fingerprint(policy)
    return json.dumps(policy, sort_keys=True) if isinstance(policy, dict) else str(policy)


def train_stage(run: LoopRun, iteration: int, base: str | dict[str, Any]) -> Path:
    """Train the iteration's checkpoint from `base` (skipped when a complete checkpoint is there)."""
    from aitp.train.checkpoint import CheckpointError, checkpoint_dir, verify_checkpoint
    from aitp.train.run import train

    out = checkpoint_dir(run.home, run.experiment, iteration)
    try:
        verify_checkpoint(out)
        return out
    except CheckpointError:
        pass
    return train(run.home, run.experiment, iteration, base, run.config.train_config(iteration), out)


def registered_version(run: LoopRun, iteration: int, checkpoint: Path) -> str | None:
    """The registry version already holding this iteration's checkpoint, if it was registered."""
    from aitp.policies.tiny.checkpoint import fingerprint
    from aitp.registry import model_name
    from aitp.registry.store import TAG

    reg = run.registry
    wanted = fingerprint(checkpoint)
    found = reg.call(
        "search model versions", reg.client.search_model_versions, f"name = '{model_name(run.experiment)}'"
    )
    for mv in found:
        tags = dict(mv.tags or {})
        if tags.get(TAG + "iteration") == str(iteration) and tags.get(TAG + "model_version") == wanted:
            return str(mv.version)
    return None


def register_stage(run: LoopRun, iteration: int, checkpoint: Path, flow_run_id: str | None = None) -> str:
    """Log the training to the iteration's MLflow run and register the checkpoint (once) as challenger."""
    version = registered_version(run, iteration, checkpoint)
    if version is not None:
        run.registry.set_alias(run.experiment, "challenger", version)
        return version
    run.registry.log_training(run.experiment, iteration, checkpoint, flow_run_id)
    return run.registry.register(run.experiment, iteration, checkpoint, flow_run_id).version


def eval_stage(run: LoopRun, iteration: int, version: str) -> Any:
    """The version's held-out eval: from the lake when it was measured, else run, committed and logged."""
    from aitp.registry import evaluate_version

    return evaluate_version(run.registry, run.experiment, iteration, version, run.config.eval_config())


def promote_stage(run: LoopRun, iteration: int, version: str) -> dict[str, Any]:
    """The promotion gate for the iteration's challenger; the decision and the champion after it."""
    from aitp.registry import gate

    decision = gate(run.registry, run.experiment, iteration, run.config.eval_config(), run.config.promotion, version)
    return decision.to_dict()


def champion_summary(run: LoopRun, iteration: int) -> dict[str, Any]:
    """The champion after the iteration: its version, model and held-out pass rate."""
    champion = run.registry.get(run.experiment, "champion")
    if champion is None:
        return {"champion_version": None, "champion_model": None, "champion_pass_rate": None}
    result = eval_stage(run, iteration, champion.version)
    return {
        "champion_version": champion.version,
        "champion_model": champion.model_version,
        "champion_pass_rate": result.score("pass_rate"),
    }


# -- the iteration's row --------------------------------------------------------------------------


def now() -> datetime:
    return datetime.now(UTC)


def iteration_row(run: LoopRun, iteration: int) -> dict[str, Any] | None:
    """The lake's `iterations` row of an iteration (None before it started)."""
    from aitp.lake import read_partition
    from aitp.lake.errors import UnknownPartitionError

    try:
        rows = read_partition(run.home, "iterations", run.experiment, iteration).to_pylist()
    except UnknownPartitionError:
        return None
    return rows[0] if rows else None


def record(run: LoopRun, iteration: int, **fields: Any) -> None:
    """Merge fields into the iteration's row (see aitp.registry.record_iteration)."""
    from aitp.registry import record_iteration

    record_iteration(run.home, run.experiment, iteration, fields)


def is_finished(run: LoopRun, iteration: int) -> bool:
    row = iteration_row(run, iteration)
    return bool(row) and row.get("status") == "done"


def log_plot(run: LoopRun, iteration: int) -> Path:
    """Draw the held-out pass rate per task over iterations and log the PNG to the iteration's MLflow run."""
    from aitp.report.plots import plot_iterations

    png = plot_iterations(run.home, run.experiment, run.home / "reports" / run.experiment / f"iter-{iteration:03d}.png")
    run_id = run.registry.iteration_run(run.experiment, iteration)
    run.registry.call("log the plot", run.registry.client.log_artifact, run_id, str(png), "plots")
    return png

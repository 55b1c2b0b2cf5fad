"""A small experiment in a lake: 3 iterations (iteration 0 trains on demonstrations, so has no rollouts)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from aitp.lake import write_partition
from tests.lake.helpers import rollout_rows

EXPERIMENT = "exp"
TASKS = ("basic_arithmetic", "chain_sum")
SCRIPT = "<script>alert('x')</script>"
T0 = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)


def eval_rows(model: str, seed: int) -> list[dict[str, Any]]:
    """Eval rows of a model: two difficulty levels per task, pass counts varying with the seed."""
    rows = []
    for t, task in enumerate(TASKS):
        for level in (0, 1):
            n_samples = 20 + 4 * level
            n_pass = (seed * 3 + t * 5 + level * 2) % n_samples
            rows.append(
                {
                    "eval_name": "heldout@abc123",
                    "model_version": model,
                    "task": task,
                    "split": "eval",
                    "difficulty_level": level,
                    "n_items": n_samples // 2,
                    "n_samples": n_samples,
                    "n_pass": n_pass,
                    "pass_rate": n_pass / n_samples,
                    "format_error_rate": 0.1,
                    "mean_completion_tokens": 42.0,
                }
            )
    return rows


def iteration_row(k: int, model_in: str, model_out: str, promoted: bool, champion: str, kept: float | None) -> dict:
    return {
        "flow_run_id": f"flow-{k}",
        "mlflow_run_id": f"mlrun-{k}",
        "config_hash": "cfg0",
        "config_json": {"tasks": list(TASKS), "group_size": 2},
        "model_in": model_in,
        "model_out": model_out,
        "promoted": promoted,
        "promote_reason": f"{'promoted' if promoted else 'kept champion'}: reason {k}",
        "champion_version": str(k + 1) if promoted else "1",
        "champion_model": champion,
        "eval_pass_rate": 0.5,
        "champion_pass_rate": 0.5,
        "kept_group_rate": kept,
        "flow_run_name": f"{EXPERIMENT}-iter-{k}",
        "code_version": "0.1.0+abc",
        "stage": "promote",
        "status": "done",
        "started_at": T0 + timedelta(hours=k),
        "finished_at": T0 + timedelta(hours=k, minutes=50),
    }


def kept_rate(rows: list[dict[str, Any]]) -> float:
    """Share of groups kept, from rollout rows."""
    groups = {(r["task"], r["group_id"]): r["group_kept"] for r in rows}
    return sum(groups.values()) / len(groups)


def build_lake(home: Path, iterations: int = 3) -> dict[str, Any]:
    """Write the experiment; return what was written (evals and rollouts by iteration, iteration rows)."""
    models = ["m-base", "m0", "m1", "m2"]
    promoted = [True, False, True]
    written: dict[str, Any] = {"evals": {}, "rollouts": {}, "iterations": {}}
    champion = None
    for k in range(iterations):
        model_out = models[k + 1]
        champion = model_out if promoted[k] else champion
        written["evals"][k] = eval_rows(model_out, seed=k + 1)
        write_partition(home, "evals", EXPERIMENT, k, written["evals"][k], shard=model_out)
        kept = None
        if k > 0:  # iteration 0 trains on demonstrations: no rollouts
            rows = [r for task in TASKS for r in rollout_rows(3 + k, 2, task=task, model_version=models[k])]
            if k == 2:
                rows[1]["completion"] = f"{SCRIPT} <answer>9</answer>"
            write_partition(home, "rollouts", EXPERIMENT, k, rows)
            written["rollouts"][k] = rows
            kept = kept_rate(rows) if k == 2 else None  # iteration 1: the report computes it from the rollouts
        row = iteration_row(k, models[k], model_out, promoted[k], champion, kept)
        write_partition(home, "iterations", EXPERIMENT, k, [row])
        written["iterations"][k] = row
    return written

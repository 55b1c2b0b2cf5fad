"""Prefect artifacts of an iteration: rollout progress, per-task pass rates, a summary linking MLflow.

Fed by the loop's events (see `aitp.loop.iteration`), so the library never imports Prefect.
"""

from __future__ import annotations

import time
from typing import Any

from prefect.artifacts import (
    create_link_artifact,
    create_markdown_artifact,
    create_progress_artifact,
    create_table_artifact,
    update_progress_artifact,
)


def _key(experiment: str, iteration: int, what: str) -> str:
    """Artifact keys: lowercase letters, digits and dashes."""
    clean = "".join(c if c.isalnum() else "-" for c in experiment.lower())
    return f"{clean}-iter-{iteration:03d}-{what}"


class ArtifactReporter:
    """Turns loop events into Prefect artifacts; progress updates at most every `every_s` seconds."""

    def __init__(self, experiment: str, mlflow_uri: str, every_s: float = 2.0) -> None:
        self.experiment = experiment
        self.mlflow_uri = mlflow_uri
        self.every_s = every_s
        self._progress: str | None = None
        self._last = 0.0

    def __call__(self, kind: str, payload: dict[str, Any]) -> None:
        if kind == "progress":
            self._on_progress(payload)
        elif kind == "iteration" and not payload.get("reused"):
            self._on_iteration(payload)

    def _on_progress(self, p: dict[str, Any]) -> None:
        percent = 100.0 * p["done"] / max(1, p["total"])
        if self._progress is None:
            self._progress = str(
                create_progress_artifact(
                    percent,
                    key=_key(self.experiment, p["iteration"], "rollouts"),
                    description=f"rollouts of iteration {p['iteration']}: items sampled and scored",
                )
            )
            self._last = time.monotonic()
        elif time.monotonic() - self._last >= self.every_s or p["done"] >= p["total"]:
            update_progress_artifact(self._progress, percent)
            self._last = time.monotonic()

    def _on_iteration(self, p: dict[str, Any]) -> None:
        k, row, metrics = p["iteration"], p["row"], p.get("eval") or {}
        task_names = sorted(
            {key.split("/")[0] for key in metrics if key.endswith("/pass_rate") and "level_" not in key}
        )
        table = [
            {
                "task": t,
                "pass_rate": round(metrics[f"{t}/pass_rate"], 4),
                "ci95_low": round(metrics[f"{t}/pass_rate_ci95_low"], 4),
                "ci95_high": round(metrics[f"{t}/pass_rate_ci95_high"], 4),
                "format_ok_rate": round(metrics[f"{t}/format_ok_rate"], 4),
            }
            for t in task_names
        ]
        if table:
            create_table_artifact(
                table,
                key=_key(self.experiment, k, "pass-rates"),
                description=f"held-out pass rate per task of iteration {k}'s model",
            )
        run_url = f"{self.mlflow_uri.rstrip('/')}/#/experiments/runs/{row.get('mlflow_run_id')}"
        if self.mlflow_uri.startswith("http"):
            create_link_artifact(run_url, link_text="MLflow run", key=_key(self.experiment, k, "mlflow"))
        create_markdown_artifact(
            _summary(self.experiment, k, row, p.get("plot"), self.mlflow_uri),
            key=_key(self.experiment, k, "summary"),
            description=f"iteration {k} of {self.experiment}",
        )
        self._progress = None


def _fmt(value: Any) -> str:
    return f"{value:.3f}" if isinstance(value, float) else ("-" if value is None else str(value))


def _summary(experiment: str, k: int, row: dict[str, Any], plot: str | None, mlflow_uri: str) -> str:
    lines = [
        f"# {experiment} iteration {k}",
        "",
        "| field | value |",
        "|---|---|",
        *(
            f"| {name} | {_fmt(row.get(name))} |"
            for name in (
                "model_in",
                "model_out",
                "eval_pass_rate",
                "champion_version",
                "champion_pass_rate",
                "kept_group_rate",
                "promoted",
                "promote_reason",
                "config_hash",
                "code_version",
                "mlflow_run_id",
            )
        ),
        "",
        f"MLflow: `{mlflow_uri}`, run `{row.get('mlflow_run_id')}` (artifact `plots/` holds the pass-rate plot).",
    ]
    if plot:
        lines.append(f"Plot of held-out pass rate per task over iterations: `{plot}`")
    return "\n".join(lines)

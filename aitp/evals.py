"""An evaluation as the lake records it: per-task rows and their metrics, and the eval-set version it pinned.

Every world's evaluator writes `evals` rows of one shape (a row per task and difficulty level) and reads them
back through here, so the promotion gate compares champion and challenger the same way in either world.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aitp.errors import AitpError
from aitp.paired import wilson

METRICS = ("pass_rate", "mean_score", "format_ok_rate")


class EvalSetChangedError(AitpError):
    """An eval set whose version differs from the one an experiment pinned."""


@dataclass
class EvalResult:
    """One model on one eval set: a row per (task, difficulty level), and the scored samples."""

    experiment: str
    iteration: int
    model_version: str
    eval_name: str
    rows: list[dict[str, Any]]
    samples: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0
    item_pass: dict[str, float] = field(default_factory=dict)
    """Item id -> share of its samples that passed: what a paired promotion compares item by item (from the
    samples when they are at hand, else read back from the lake's `eval_samples` with the rows)."""

    def __post_init__(self) -> None:
        if not self.item_pass and self.samples:
            passed: dict[str, list[float]] = {}
            for sample in self.samples:
                passed.setdefault(str(sample["item_id"]), []).append(1.0 if sample["passed"] else 0.0)
            self.item_pass = {item: sum(v) / len(v) for item, v in passed.items()}

    def _summary(self, rows: list[dict[str, Any]]) -> dict[str, float]:
        n = sum(r["n_samples"] for r in rows)
        n_pass = sum(r["n_pass"] for r in rows)
        low, high = wilson(n_pass, n)
        mean = lambda key: sum(r[key] * r["n_samples"] for r in rows) / n if n else 0.0  # noqa: E731
        return {
            "pass_rate": n_pass / n if n else 0.0,
            "pass_rate_ci95_low": low,
            "pass_rate_ci95_high": high,
            "mean_score": mean("mean_score"),
            "format_error_rate": mean("format_error_rate"),
            "format_ok_rate": 1.0 - mean("format_error_rate"),
            "mean_completion_tokens": mean("mean_completion_tokens"),
            "n_samples": float(n),
        }

    def metrics(self) -> dict[str, float]:
        """Overall, per-task (`<task>/...`) and per-level (`level_<k>/...`) metrics."""
        out = self._summary(self.rows)
        for task in sorted({r["task"] for r in self.rows}):
            out.update(
                {f"{task}/{k}": v for k, v in self._summary([r for r in self.rows if r["task"] == task]).items()}
            )
        levels = sorted({r["difficulty_level"] for r in self.rows if r["difficulty_level"] is not None})
        for level in levels:
            rows = [r for r in self.rows if r["difficulty_level"] == level]
            out.update({f"level_{level}/{k}": v for k, v in self._summary(rows).items()})
        return out

    def score(self, metric: str = "pass_rate") -> float:
        """The overall value of a promotion metric."""
        if metric not in METRICS:
            raise AitpError(f"unknown promotion metric '{metric}': use one of {', '.join(METRICS)}")
        return self._summary(self.rows)[metric]


def pinned_eval_name(home: str | Path, experiment: str, name: str) -> str | None:
    """The `<name>@<version>` an experiment's evals were measured on, or None before its first eval."""
    from aitp.lake import connect

    con = connect(home)
    try:
        found = con.execute(
            "SELECT DISTINCT eval_name FROM evals WHERE experiment = $e AND eval_name LIKE $p",
            {"e": experiment, "p": f"{name}@%"},
        ).fetchall()
    finally:
        con.close()
    return sorted(r[0] for r in found)[0] if found else None


def load_eval(home: str | Path, experiment: str, model_version: str, eval_name: str) -> EvalResult | None:
    """A model's latest evaluation on an eval set, rebuilt from the lake's `evals` rows (None if never run)."""
    from aitp.lake import connect

    con = connect(home)
    try:
        cursor = con.execute(
            """SELECT * FROM evals WHERE experiment = $e AND model_version = $m AND eval_name = $n
               QUALIFY iteration = max(iteration) OVER () ORDER BY task, difficulty_level""",
            {"e": experiment, "m": model_version, "n": eval_name},
        )
        names = [d[0] for d in cursor.description]
        rows = [dict(zip(names, r)) for r in cursor.fetchall()]
    finally:
        con.close()
    if not rows:
        return None
    keep = (
        "task",
        "difficulty_level",
        "n_items",
        "n_samples",
        "n_pass",
        "pass_rate",
        "mean_score",
        "format_error_rate",
        "mean_completion_tokens",
    )
    return EvalResult(
        experiment,
        int(rows[0]["iteration"]),
        model_version,
        eval_name,
        [{k: r[k] for k in keep} for r in rows],
        seconds=float(rows[0]["seconds"] or 0.0),
        item_pass=item_pass_rates(home, experiment, model_version, eval_name, int(rows[0]["iteration"])),
    )


def item_pass_rates(
    home: str | Path, experiment: str, model_version: str, eval_name: str | None = None, iteration: int | None = None
) -> dict[str, float]:
    """Item id -> share of the model's eval samples that passed (one eval set and iteration where given): what
    every paired comparison of two models pairs over."""
    from aitp.lake import connect

    con = connect(home)
    try:
        rows = con.execute(
            """SELECT item_id, avg(CASE WHEN passed THEN 1.0 ELSE 0.0 END) FROM eval_samples
               WHERE experiment = $e AND model_version = $m AND ($n IS NULL OR eval_name = $n)
                 AND ($i IS NULL OR iteration = $i)
               GROUP BY item_id""",
            {"e": experiment, "m": model_version, "n": eval_name, "i": iteration},
        ).fetchall()
    finally:
        con.close()
    return {str(item): float(rate) for item, rate in rows}

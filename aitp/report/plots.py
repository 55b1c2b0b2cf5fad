"""Held-out pass rate per task over iterations, and the kept-group rate: read from the lake, drawn as one PNG.

Each iteration has two models worth plotting: the challenger it trained (`model_out`) and the champion
after its promotion decision. A model is evaluated once, at the iteration that trained it, so the
champion's numbers are looked up by model, not by iteration.
"""

from __future__ import annotations

import io
import math
from pathlib import Path
from typing import Any

import duckdb

from aitp.atomic import publish_bytes
from aitp.errors import AitpError, UnknownExperimentError

OVERALL = "(overall)"
FIGSIZE = (10.0, 7.0)
DPI = 100


class ReportError(AitpError):
    """A report that cannot be built from what the lake holds."""


def require_experiment(con: duckdb.DuckDBPyConnection, experiment: str, home: Any) -> None:
    """Raise a one-line error naming the known experiments when `experiment` has no iterations."""
    known = [r[0] for r in con.execute("SELECT DISTINCT experiment FROM iterations ORDER BY 1").fetchall()]
    if experiment in known:
        return
    if known:
        raise UnknownExperimentError(
            f"unknown experiment '{experiment}' in the lake at {home}: use one of {', '.join(known)}"
        )
    raise UnknownExperimentError(
        f"no experiment has iterations in the lake at {home}: run the loop first, or pass the right --home"
    )


def read_iterations(con: duckdb.DuckDBPyConnection, experiment: str) -> list[dict[str, Any]]:
    """The experiment's `iterations` rows in order, with the champion filled in where a row lacks it."""
    cur = con.execute("SELECT * FROM iterations WHERE experiment = $e ORDER BY iteration", {"e": experiment})
    names = [d[0] for d in cur.description]
    rows = [dict(zip(names, r)) for r in cur.fetchall()]
    champion = None
    for row in rows:
        # an unfinished iteration has no champion recorded: the one before it still holds
        champion = row["champion_model"] or (row["model_out"] if row["promoted"] else champion)
        row["champion_model"] = champion
    return rows


def _eval_name(con: duckdb.DuckDBPyConnection, experiment: str) -> str | None:
    """The eval set the experiment pinned first (its held-out set)."""
    row = con.execute(
        "SELECT eval_name FROM evals WHERE experiment = $e ORDER BY iteration, eval_name NULLS LAST LIMIT 1",
        {"e": experiment},
    ).fetchone()
    return row[0] if row else None


def _eval_counts(con: duckdb.DuckDBPyConnection, experiment: str) -> dict[tuple[str, str], tuple[int, int]]:
    """(model, task) -> (n_pass, n_samples) summed over difficulty levels, from each model's first evaluation."""
    rows = con.execute(
        """
        WITH first AS (
            SELECT * FROM evals WHERE experiment = $e AND eval_name IS NOT DISTINCT FROM $name
            QUALIFY iteration = min(iteration) OVER (PARTITION BY model_version))
        SELECT model_version, task, sum(n_pass), sum(n_samples) FROM first GROUP BY ALL
        """,
        {"e": experiment, "name": _eval_name(con, experiment)},
    ).fetchall()
    counts: dict[tuple[str, str], tuple[int, int]] = {}
    for model, task, n_pass, n_samples in rows:
        counts[(model, task)] = (int(n_pass or 0), int(n_samples or 0))
        p, n = counts.get((model, OVERALL), (0, 0))
        counts[(model, OVERALL)] = (p + int(n_pass or 0), n + int(n_samples or 0))
    return counts


def _kept_rates(con: duckdb.DuckDBPyConnection, experiment: str) -> dict[int, float]:
    """Share of decided rollout groups kept, per iteration (fallback when the iteration row lacks it)."""
    rows = con.execute(
        "SELECT iteration, count(*) FILTER (WHERE kept) / count(*)::DOUBLE FROM groups"
        " WHERE experiment = $e AND kept IS NOT NULL GROUP BY iteration",
        {"e": experiment},
    ).fetchall()
    return {int(k): float(v) for k, v in rows}


def _rate(counts: dict[tuple[str, str], tuple[int, int]], model: str | None, task: str) -> tuple[float | None, int]:
    n_pass, n = counts.get((model, task), (0, 0)) if model else (0, 0)
    return (n_pass / n if n else None), n


def table_from_connection(con: duckdb.DuckDBPyConnection, experiment: str) -> list[dict[str, Any]]:
    """`iteration_table` on an open connection (the report reuses one connection)."""
    iterations = read_iterations(con, experiment)
    counts = _eval_counts(con, experiment)
    kept = _kept_rates(con, experiment)
    tasks = sorted({task for _, task in counts if task != OVERALL}) + [OVERALL]
    table = []
    for it in iterations:
        k = int(it["iteration"])
        kept_rate = it["kept_group_rate"] if it["kept_group_rate"] is not None else kept.get(k)
        for task in tasks:
            champion_rate, champion_n = _rate(counts, it["champion_model"], task)
            challenger_rate, challenger_n = _rate(counts, it["model_out"], task)
            table.append(
                {
                    "iteration": k,
                    "task": task,
                    "champion_model": it["champion_model"],
                    "model_out": it["model_out"],
                    "promoted": it["promoted"],
                    "champion_pass_rate": champion_rate,
                    "champion_n_samples": champion_n,
                    "challenger_pass_rate": challenger_rate,
                    "challenger_n_samples": challenger_n,
                    "kept_group_rate": kept_rate,
                }
            )
    return table


def iteration_table(home: Any, experiment: str) -> list[dict[str, Any]]:
    """One row per (iteration, task, plus OVERALL): champion and challenger held-out pass rate, kept-group rate."""
    from aitp.lake import connect

    con = connect(home, read_only=True)
    try:
        require_experiment(con, experiment, home)
        return table_from_connection(con, experiment)
    finally:
        con.close()


def _nan(value: float | None) -> float:
    return math.nan if value is None else float(value)


def render_png(table: list[dict[str, Any]], experiment: str) -> bytes:
    """The PNG of an iteration table: pass rates per task (top) and kept-group rate (bottom)."""
    from matplotlib.figure import Figure  # no pyplot: no global state, no GUI backend
    from matplotlib.lines import Line2D
    from matplotlib.ticker import MaxNLocator

    fig = Figure(figsize=FIGSIZE, dpi=DPI, layout="constrained")
    top, bottom = fig.subplots(2, 1, sharex=True, height_ratios=[3, 1])
    iterations = sorted({r["iteration"] for r in table})
    tasks = list(dict.fromkeys(r["task"] for r in table))
    palette = [f"C{i % 10}" for i in range(len(tasks))]
    for task, color in zip(tasks, palette):
        rows = sorted((r for r in table if r["task"] == task), key=lambda r: r["iteration"])
        xs = [r["iteration"] for r in rows]
        overall = task == OVERALL
        style = {"color": "black" if overall else color, "linewidth": 3.0 if overall else 1.5, "marker": "o"}
        top.plot(xs, [_nan(r["champion_pass_rate"]) for r in rows], label=task, **style)
        dashed = {**style, "linestyle": "--", "marker": "x", "linewidth": style["linewidth"] * 0.7, "alpha": 0.8}
        top.plot(xs, [_nan(r["challenger_pass_rate"]) for r in rows], **dashed)
    handles, labels = top.get_legend_handles_labels()
    handles += [Line2D([], [], color="grey", marker="o"), Line2D([], [], color="grey", linestyle="--", marker="x")]
    labels += ["champion", "challenger (model_out)"]
    top.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    top.set_ylim(-0.02, 1.02)
    top.set_ylabel("held-out pass rate")
    top.set_title(f"{experiment}: held-out pass rate per task")
    top.grid(alpha=0.3)

    kept = {r["iteration"]: r["kept_group_rate"] for r in table}
    bottom.bar(iterations, [_nan(kept[k]) for k in iterations], color="C2", width=0.6)
    for k in iterations:
        if kept[k] is None:  # iteration 0 trains on demonstrations: no rollout groups to keep
            bottom.text(k, 0.05, "no rollouts", ha="center", va="bottom", fontsize="small", color="grey")
    bottom.set_ylim(0, 1.0)
    bottom.set_ylabel("kept-group rate")
    bottom.set_xlabel("iteration")
    bottom.xaxis.set_major_locator(MaxNLocator(integer=True))
    bottom.set_xlim(min(iterations) - 0.5, max(iterations) + 0.5)
    bottom.grid(alpha=0.3, axis="y")
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    return buffer.getvalue()


def plot_iterations(home: Any, experiment: str, out: Path) -> Path:
    """Write the experiment's pass-rate / kept-group-rate PNG to `out`; return its path."""
    return publish_bytes(out, render_png(iteration_table(home, experiment), experiment))

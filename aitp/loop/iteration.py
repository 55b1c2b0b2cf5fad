"""One iteration as a fixed sequence of stages, run through a caller the orchestrator supplies.

The sequence lives here once; Prefect (flows/) passes a caller that runs each stage as its own
task run, a plain caller runs them in-process. Events (`stage`, `progress`, `iteration`) go to
an `on_event` hook: the CLI's live display and Prefect's artifacts both listen there.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from aitp.loop import stages
from aitp.loop.stages import LoopRun
from aitp.train.data import NoTrainingDataError

Caller = Callable[..., Any]
Event = Callable[[str, dict[str, Any]], None]


def call_directly(name: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """The plain caller: run the stage here."""
    return fn(*args, **kwargs)


def _quiet(kind: str, payload: dict[str, Any]) -> None:
    return None


def run_iteration(
    run: LoopRun,
    iteration: int,
    client: Any = None,
    call: Caller = call_directly,
    on_event: Event = _quiet,
    flow_run_id: str | None = None,
) -> dict[str, Any]:
    """Run (or finish) iteration k: every stage committed before is reused; return the iteration's row."""
    started = time.perf_counter()
    row = stages.iteration_row(run, iteration) or {}
    if row.get("status") == "done":
        on_event("iteration", {"iteration": iteration, "row": row, "reused": True})
        return row
    mlflow_run_id = run.registry.iteration_run(run.experiment, iteration, flow_run_id)
    base = stages.starting_policy(run, iteration)
    stages.record(
        run,
        iteration,
        flow_run_id=flow_run_id,
        flow_run_name=run.flow_run_name(iteration),
        mlflow_run_id=mlflow_run_id,
        config_hash=run.config_hash,
        config_json=run.config.model_dump(mode="json"),
        code_version=run.code_version,
        model_in=stages.model_id(base),
        status="running",
        started_at=row.get("started_at") or stages.now(),
    )

    def stage(name: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        on_event("stage", {"iteration": iteration, "stage": name, "state": "start"})
        out = call(name, fn, *args, **kwargs)
        on_event("stage", {"iteration": iteration, "stage": name, "state": "done", "seconds": time.perf_counter() - t0})
        return out

    if iteration == 0 or run.config.rolls_out(iteration):  # a control iteration reuses iteration 0's items
        stage("items", stages.commit_items, run, iteration)
    kept_group_rate = None
    if run.config.rolls_out(iteration):
        chunks = stages.rollout_chunks(run.config, iteration)
        total = sum(len(c) for c in chunks)
        pending = stages.pending_chunks(run, iteration)
        before = sum(len(chunks[i]) for i in range(len(chunks)) if i not in pending)

        def progress(done: int, _total: int, base_done: int) -> None:
            on_event(
                "progress", {"iteration": iteration, "stage": "rollouts", "done": base_done + done, "total": total}
            )

        for index in pending:
            offset = before
            stage(
                f"rollouts-{stages.chunk_name(index)}",
                stages.run_chunk,
                run,
                iteration,
                index,
                base,
                client,
                lambda d, t, o=offset: progress(d, t, o),
            )
            before += len(chunks[index])
        summary = stages.rollout_summary(run, iteration)
        kept_group_rate = summary["kept_group_rate"]
        on_event("rollouts", {"iteration": iteration, **summary})
        stages.record(run, iteration, stage="rollouts", kept_group_rate=kept_group_rate)
        if not summary["kept_groups"]:
            why = f"no group scored above {run.config.rollouts.threshold:g}: nothing to train on"
            return _skip_training(run, iteration, why, kept_group_rate, call, on_event)
    try:
        checkpoint = stage("train", stages.train_stage, run, iteration, base)
    except NoTrainingDataError as exc:  # nothing kept: the champion stays, the loop goes on
        return _skip_training(run, iteration, str(exc), kept_group_rate, call, on_event)
    stages.record(run, iteration, stage="train")
    version = stage("register", stages.register_stage, run, iteration, checkpoint, flow_run_id)
    result = stage("eval", stages.eval_stage, run, iteration, version)
    stages.record(run, iteration, stage="eval", eval_pass_rate=result.score("pass_rate"))
    decision = stage("promote", stages.promote_stage, run, iteration, version)
    champion = stages.champion_summary(run, iteration)
    run.registry.log_metrics(
        mlflow_run_id,
        {
            "loop/eval_pass_rate": result.score("pass_rate"),
            "loop/champion_pass_rate": champion["champion_pass_rate"] or 0.0,
            "loop/promoted": float(decision["promoted"]),
            "loop/seconds": time.perf_counter() - started,
            **({"loop/kept_group_rate": kept_group_rate} if kept_group_rate is not None else {}),
        },
        step=iteration,
    )
    done = {"decision": decision, "eval": result.metrics()}
    return _finish(run, iteration, call, on_event, done, kept_group_rate=kept_group_rate, **champion)


def _finish(
    run: LoopRun, iteration: int, call: Caller, on_event: Event, payload: dict[str, Any], **fields: Any
) -> dict[str, Any]:
    """Mark the iteration done in the lake, plot, close its MLflow run, tell the listeners."""
    stages.record(run, iteration, stage="promote", status="done", finished_at=stages.now(), **fields)
    plot = call("plot", stages.log_plot, run, iteration)
    run.registry.finish_iteration(run.experiment, iteration)
    final = stages.iteration_row(run, iteration) or {}
    on_event("iteration", {"iteration": iteration, "row": final, **payload, "plot": str(plot)})
    return final


def _skip_training(
    run: LoopRun, iteration: int, why: str, kept_group_rate: float | None, call: Caller, on_event: Event
) -> dict[str, Any]:
    champion = stages.champion_summary(run, iteration)
    reason = f"not trained: {why.split(': ')[0]}"
    fields = {"promoted": False, "promote_reason": reason, "kept_group_rate": kept_group_rate, **champion}
    return _finish(run, iteration, call, on_event, {"decision": None, "eval": {}}, **fields)


def run_loop(
    run: LoopRun,
    client: Any = None,
    call: Caller = call_directly,
    on_event: Event = _quiet,
    iterations: int | None = None,
) -> list[dict[str, Any]]:
    """Iterations 0..N (N from the config unless given), stopping early at the target pass rate."""
    last = run.config.iterations if iterations is None else iterations
    rows = []
    for k in range(last + 1):
        row = run_iteration(run, k, client, call, on_event)
        rows.append(row)
        target = run.config.target_pass_rate
        if target is not None and (row.get("champion_pass_rate") or 0.0) >= target:
            on_event("target", {"iteration": k, "champion_pass_rate": row["champion_pass_rate"]})
            break
    return rows

"""One iteration as a fixed sequence of committed stages; the orchestrator decides how each stage runs.

The sequence lives here once. `Stages` maps each stage to the callable that runs it: the plain
library functions by default (in-process, no orchestrator: fast for development and tests), and
Prefect tasks wrapping the same functions in `flows/` (one task run per stage, per acting chunk).
Events (`stage`, `progress`, `rollouts`, `iteration`) go to an `on_event` hook: the CLI's live
display and Prefect's artifacts both listen there.
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

from aitp.errors import AitpError
from aitp.lake.heal import REPAIRED
from aitp.loop import stages
from aitp.loop.experiment import LoopRun, now
from aitp.policies.spec import model_id
from aitp.train.data import NoTrainingDataError

Event = Callable[[str, dict[str, Any]], None]
Stage = Callable[..., Any]


@dataclass(frozen=True)
class Stages:
    """The callables that run an iteration's stages, in the order they run."""

    items: Stage = stages.commit_items
    act: Stage = stages.act_on_chunk
    train: Stage = stages.train_stage
    register: Stage = stages.register_stage
    evaluate: Stage = stages.eval_stage
    promote: Stage = stages.promote_stage
    plot: Stage = stages.log_plot


IN_PROCESS = Stages()


def quiet(kind: str, payload: dict[str, Any]) -> None:
    """An event listener that ignores everything."""


def broadcast(*listeners: Event) -> Event:
    """One listener that hands each event to every given listener in turn."""

    def emit(kind: str, payload: dict[str, Any]) -> None:
        for listener in listeners:
            listener(kind, payload)

    return emit


def run_iteration(
    run: LoopRun,
    iteration: int,
    client: Any = None,
    steps: Stages = IN_PROCESS,
    on_event: Event = quiet,
    flow_run_id: str | None = None,
) -> dict[str, Any]:
    """Run (or finish) iteration k: every stage committed before is reused; return the iteration's row."""
    started = time.perf_counter()
    env = run.environment
    row = stages.iteration_row(run, iteration) or {}
    if row.get("status") == "done":
        on_event("iteration", {"iteration": iteration, "row": row, "reused": True})
        return row
    # A repair took shards of an iteration that had decided: regenerate them, keep the decision and champion
    # it recorded (later iterations may have crowned another champion since; deciding again would differ).
    decided = row.get("status") == REPAIRED and row.get("promoted") is not None
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
        model_in=model_id(base),
        status="running",
        started_at=row.get("started_at") or now(),
    )

    timed = _timer(iteration, on_event)
    if env.commits_items(iteration):
        timed("items", steps.items, run, iteration)
    kept_rate, acted = None, {}
    if env.acts(iteration):
        sampler = stages.acting_policy(run, iteration)
        lag = _checked_lag(run, iteration)
        _act(run, iteration, sampler, client, steps, on_event, timed)
        summary = stages.act_summary(run, iteration)
        kept_rate = summary.kept_rate
        acted = {f"loop/act/{k}": float(v) for k, v in summary.details.items() if _is_number(v)}
        acted["loop/act/policy_lag"] = float(lag)
        on_event("rollouts", {"iteration": iteration, **summary.details, "text": summary.text})
        lineage = {"rollouts_model": model_id(sampler), "policy_lag": lag}
        stages.record(run, iteration, stage="rollouts", kept_group_rate=kept_rate, **lineage)
        if not summary.kept:
            return _skip_training(run, iteration, summary.nothing_kept, kept_rate, steps, on_event, decided)
    released = env.release(iteration, client)  # a worker sharing the training's card gives its decoder memory back
    if released:
        on_event("released", {"iteration": iteration, "text": released})
    ahead = _act_ahead(run, iteration, client, steps, on_event)
    try:
        try:
            checkpoint = timed("train", steps.train, run, iteration, base, client)
        except NoTrainingDataError as exc:  # nothing kept: the champion stays, the loop goes on
            _join(ahead)
            return _skip_training(run, iteration, str(exc), kept_rate, steps, on_event, decided)
        stages.record(run, iteration, stage="train", **stages.train_figures(checkpoint))
        version = timed("register", steps.register, run, iteration, checkpoint, flow_run_id)
        result = timed("eval", steps.evaluate, run, iteration, version)
        stages.record(run, iteration, stage="eval", eval_pass_rate=result.score("pass_rate"))
        if decided:
            held = stages.version_of_model(run, row["model_in"])  # the champion it was judged against
            if held is not None and held.version != version:
                timed("eval", steps.evaluate, run, iteration, held.version)
            _join(ahead)
            return _finish(run, iteration, steps, on_event, {"decision": None, "eval": result.metrics()})
        decision = timed("promote", steps.promote, run, iteration, version)
        if iteration < run.config.iterations and not env.acts_ahead(iteration + 1):
            env.prepare(iteration + 1, base, client)  # the workers ready the next acting while this iteration closes
        _join(ahead)  # the iteration is done when the next one's rollouts, acted beside it, are committed
        champion = stages.champion_summary(run, iteration)
        run.registry.log_metrics(
            mlflow_run_id,
            {
                "loop/eval_pass_rate": result.score("pass_rate"),
                "loop/champion_pass_rate": champion["champion_pass_rate"] or 0.0,
                "loop/promoted": float(decision["promoted"]),
                "loop/seconds": time.perf_counter() - started,
                **({"loop/kept_group_rate": kept_rate} if kept_rate is not None else {}),
                **acted,  # the environment's own figures of what acting produced (ActSummary.details)
            },
            step=iteration,
        )
        done = {"decision": decision, "eval": result.metrics()}
        return _finish(run, iteration, steps, on_event, done, kept_group_rate=kept_rate, **champion)
    finally:
        if ahead is not None:  # a failed stage still lets the acting ahead end before the error goes up
            wait([ahead])


def _timer(iteration: int, on_event: Event) -> Callable[..., Any]:
    """Run a stage, telling the listeners when it starts and how long it took."""

    def timed(name: str, fn: Stage, *args: Any) -> Any:
        t0 = time.perf_counter()
        on_event("stage", {"iteration": iteration, "stage": name, "state": "start"})
        out = fn(*args)
        on_event("stage", {"iteration": iteration, "stage": name, "state": "done", "seconds": time.perf_counter() - t0})
        return out

    return timed


class PolicyLagError(AitpError):
    """Rollouts sampled by a model further behind the trained one than `rollouts.max_policy_lag` allows."""


def _checked_lag(run: LoopRun, iteration: int) -> int:
    lag, bound = stages.policy_lag(run, iteration), run.config.rollouts.max_policy_lag
    if lag > bound:
        raise PolicyLagError(
            f"iteration {iteration}'s rollouts come from a model {lag} champions behind its own, over "
            f"rollouts.max_policy_lag {bound}: set rollouts.overlap: false"
        )
    return lag


def _act_ahead(run: LoopRun, iteration: int, client: Any, steps: Stages, on_event: Event) -> Future | None:
    """Start the next iteration's acting (`rollouts.overlap`) beside this one's training; None when it has none.

    It runs in a thread of this process: acting only sends work to the Dask workers and commits what
    comes back, so the thread mostly waits while the training works. The Prefect context is copied
    into it, so its stages are task runs of this iteration's flow run.
    """
    following = iteration + 1
    env = run.environment
    if following > run.config.iterations or not env.acts_ahead(following):
        return None
    sampler = stages.acting_policy(run, following)
    timed = _timer(following, on_event)

    def act() -> None:
        if env.commits_items(following):
            timed("items", steps.items, run, following)
        _act(run, following, sampler, client, steps, on_event, timed)

    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"act-ahead-{following}")
    try:
        return pool.submit(contextvars.copy_context().run, act)
    finally:
        pool.shutdown(wait=False)  # the thread ends with its work; the future stays answerable


def _join(ahead: Future | None) -> None:
    """Wait for the acting ahead, raising its error (the iteration is then not done, and resumes)."""
    if ahead is not None:
        ahead.result()


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _act(run: LoopRun, iteration: int, base: Any, client: Any, steps: Stages, on_event: Event, timed) -> None:
    """Act on every chunk not yet committed, reporting progress over the whole iteration."""
    chunks = stages.item_chunks(run, iteration)
    total = sum(len(c) for c in chunks)
    pending = stages.pending_chunks(run, iteration)
    before = sum(len(chunks[i]) for i in range(len(chunks)) if i not in pending)
    for index in pending:

        def progress(done: int, _total: int, offset: int = before) -> None:
            on_event("progress", {"iteration": iteration, "stage": "rollouts", "done": offset + done, "total": total})

        timed(f"rollouts-{stages.chunk_name(index)}", steps.act, run, iteration, index, base, client, progress)
        before += len(chunks[index])


def _finish(
    run: LoopRun, iteration: int, steps: Stages, on_event: Event, payload: dict[str, Any], **fields: Any
) -> dict[str, Any]:
    """Mark the iteration done in the lake, plot, close its MLflow run, tell the listeners."""
    stages.record(run, iteration, stage="promote", status="done", finished_at=now(), **fields)
    plot = steps.plot(run, iteration)
    run.registry.finish_iteration(run.experiment, iteration)
    final = stages.iteration_row(run, iteration) or {}
    on_event("iteration", {"iteration": iteration, "row": final, **payload, "plot": str(plot)})
    return final


def _skip_training(
    run: LoopRun, iteration: int, why: str, kept_rate: float | None, steps: Stages, on_event: Event, decided: bool
) -> dict[str, Any]:
    champion = {} if decided else stages.champion_summary(run, iteration)
    reason = f"not trained: {why.split(': ')[0]}"
    fields = {"promoted": False, "promote_reason": reason, "kept_group_rate": kept_rate, **champion}
    return _finish(run, iteration, steps, on_event, {"decision": None, "eval": {}}, **fields)

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
from dataclasses import dataclass, field
from typing import Any

from aitp import faults
from aitp.errors import AitpError
from aitp.lake.errors import LakeNotWholeError
from aitp.lake.heal import REPAIRED, missing_shards
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


@dataclass
class _Pass:
    """One attempt at an iteration: what its stages share."""

    run: LoopRun
    iteration: int
    client: Any
    steps: Stages
    on_event: Event
    flow_run_id: str | None
    row: dict[str, Any]
    """The iteration's row as this attempt found it (a resumed iteration's says what was done)."""
    base: Any
    """The model the iteration trains from."""
    started: float = field(default_factory=time.perf_counter)
    mlflow_run_id: str | None = None
    kept_rate: float | None = None
    acted: dict[str, float] = field(default_factory=dict)
    """The environment's own figures of what acting produced (ActSummary.details), for MLflow."""

    @property
    def decided(self) -> bool:
        """A repair took shards of an iteration that had decided: regenerate them, keep the decision and champion
        it recorded (later iterations may have crowned another champion since; deciding again would differ)."""
        return self.row.get("status") == REPAIRED and self.row.get("promoted") is not None

    def timed(self, name: str, fn: Stage, *args: Any) -> Any:
        return _timer(self.iteration, self.on_event)(name, fn, *args)


def run_iteration(
    run: LoopRun,
    iteration: int,
    client: Any = None,
    steps: Stages = IN_PROCESS,
    on_event: Event = quiet,
    flow_run_id: str | None = None,
) -> dict[str, Any]:
    """Run (or finish) iteration k: every stage committed before is reused; return the iteration's row."""
    row = stages.iteration_row(run, iteration) or {}
    if row.get("status") == "done":
        on_event("iteration", {"iteration": iteration, "row": row, "reused": True})
        return row
    it = _Pass(run, iteration, client, steps, on_event, flow_run_id, row, stages.starting_policy(run, iteration))
    _open(it)
    skipped = _act_stage(it)
    if skipped is not None:
        return skipped
    released = run.environment.release(iteration, client)  # a worker sharing the card gives its decoder memory back
    if released:
        on_event("released", {"iteration": iteration, "text": released})
    ahead = _act_ahead(run, iteration, client, steps, on_event)
    try:
        return _train_and_judge(it, ahead)
    finally:
        if ahead is not None:  # a failed stage still lets the acting ahead end before the error goes up
            wait([ahead])


def _open(it: _Pass) -> None:
    """Record the iteration as running: its flow and MLflow runs, config, code and starting model."""
    run, iteration = it.run, it.iteration
    it.mlflow_run_id = run.registry.iteration_run(run.experiment, iteration, it.flow_run_id)
    stages.record(
        run,
        iteration,
        flow_run_id=it.flow_run_id,
        flow_run_name=run.flow_run_name(iteration),
        mlflow_run_id=it.mlflow_run_id,
        config_hash=run.config_hash,
        config_json=run.config.model_dump(mode="json"),
        code_version=run.code_version,
        model_in=model_id(it.base),
        status="running",
        started_at=it.row.get("started_at") or now(),
    )


def _act_stage(it: _Pass) -> dict[str, Any] | None:
    """Commit the items and act on them; the finished row when nothing was kept to train on, else None."""
    run, iteration, env = it.run, it.iteration, it.run.environment
    if env.commits_items(iteration):
        it.timed("items", it.steps.items, run, iteration)
    if not env.acts(iteration):
        return None
    sampler = stages.acting_policy(run, iteration)
    lag = _checked_lag(run, iteration)
    _act(run, iteration, sampler, it.client, it.steps, it.on_event, it.timed)
    summary = stages.act_summary(run, iteration)
    it.kept_rate = summary.kept_rate
    it.acted = {f"loop/act/{k}": float(v) for k, v in summary.details.items() if _is_number(v)}
    it.acted["loop/act/policy_lag"] = float(lag)
    it.on_event("rollouts", {"iteration": iteration, **summary.details, "text": summary.text})
    lineage = {"rollouts_model": model_id(sampler), "policy_lag": lag}
    stages.record(run, iteration, stage="rollouts", kept_group_rate=it.kept_rate, **lineage)
    return None if summary.kept else _skip_training(it, summary.nothing_kept)


def _train_and_judge(it: _Pass, ahead: Future | None) -> dict[str, Any]:
    """Train, register and evaluate the challenger, judge it against the champion, finish the iteration."""
    run, iteration, steps = it.run, it.iteration, it.steps
    try:
        checkpoint = it.timed("train", steps.train, run, iteration, it.base, it.client)
    except NoTrainingDataError as exc:  # nothing kept: the champion stays, the loop goes on
        _join(ahead)
        return _skip_training(it, str(exc))
    stages.record(run, iteration, stage="train", **stages.train_figures(checkpoint))
    version = it.timed("register", steps.register, run, iteration, checkpoint, it.flow_run_id)
    result = it.timed("eval", steps.evaluate, run, iteration, version)
    stages.record(run, iteration, stage="eval", eval_pass_rate=result.score("pass_rate"))
    if it.decided:
        held = stages.version_of_model(run, it.row["model_in"])  # the champion it was judged against
        if held is not None and held.version != version:
            it.timed("eval", steps.evaluate, run, iteration, held.version)
        _join(ahead)
        return _finish(run, iteration, steps, it.on_event, {"decision": None, "eval": result.metrics()})
    decision = it.timed("promote", steps.promote, run, iteration, version)
    if iteration < run.config.iterations and not run.environment.acts_ahead(iteration + 1):
        run.environment.prepare(iteration + 1, it.base, it.client)  # readied while this iteration closes
    _join(ahead)  # the iteration is done when the next one's rollouts, acted beside it, are committed
    champion = stages.champion_summary(run, iteration)
    _log_metrics(it, result.score("pass_rate"), champion["champion_pass_rate"], decision["promoted"])
    done = {"decision": decision, "eval": result.metrics()}
    return _finish(run, iteration, steps, it.on_event, done, kept_group_rate=it.kept_rate, **champion)


def _log_metrics(it: _Pass, pass_rate: float, champion_rate: float | None, promoted: bool) -> None:
    """The iteration's figures as MLflow metrics of its run, stepped by iteration."""
    metrics = {
        "loop/eval_pass_rate": pass_rate,
        "loop/champion_pass_rate": champion_rate or 0.0,
        "loop/promoted": float(promoted),
        "loop/seconds": time.perf_counter() - it.started,
        **({"loop/kept_group_rate": it.kept_rate} if it.kept_rate is not None else {}),
        **it.acted,
    }
    it.run.registry.log_metrics(it.mlflow_run_id, metrics, step=it.iteration)


def _timer(iteration: int, on_event: Event) -> Callable[..., Any]:
    """Run a stage, telling the listeners when it starts and how long it took."""

    def timed(name: str, fn: Stage, *args: Any) -> Any:
        t0 = time.perf_counter()
        faults.point(f"{name}:start:{iteration}")
        on_event("stage", {"iteration": iteration, "stage": name, "state": "start"})
        out = fn(*args)
        on_event("stage", {"iteration": iteration, "stage": name, "state": "done", "seconds": time.perf_counter() - t0})
        faults.point(f"{name}:done:{iteration}")
        return out

    return timed


class PolicyLagError(AitpError):
    """Rollouts sampled by a model further behind the trained one than `rollouts.max_policy_lag` allows."""


def _checked_lag(run: LoopRun, iteration: int) -> int:
    lag, bound = stages.policy_lag(run, iteration), run.environment.max_policy_lag
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
    """Mark the iteration done in the lake (only once a repair's every gap is filled again), plot, close its MLflow
    run, tell the listeners."""
    gaps = missing_shards(run.home, run.experiment, iteration)
    if gaps:
        raise LakeNotWholeError(
            f"iteration {iteration} of '{run.experiment}' was redone but still lacks {', '.join(g.label for g in gaps)}"
            " that a repair quarantined, and no stage writes them again: restore them from the quarantine "
            "(<home>/lake/_quarantine) or start a new experiment"
        )
    stages.record(run, iteration, stage="promote", status="done", finished_at=now(), **fields)
    plot = steps.plot(run, iteration)
    run.registry.finish_iteration(run.experiment, iteration)
    final = stages.iteration_row(run, iteration) or {}
    on_event("iteration", {"iteration": iteration, "row": final, **payload, "plot": str(plot)})
    return final


def _skip_training(it: _Pass, why: str) -> dict[str, Any]:
    """Finish an iteration that had nothing to train on: the champion stays."""
    champion = {} if it.decided else stages.champion_summary(it.run, it.iteration)
    reason = f"not trained: {why.split(': ')[0]}"
    fields = {"promoted": False, "promote_reason": reason, "kept_group_rate": it.kept_rate, **champion}
    return _finish(it.run, it.iteration, it.steps, it.on_event, {"decision": None, "eval": {}}, **fields)

"""Prefect flows: one iteration (eval -> train -> promote) and the loop of N iterations.

Each iteration is its own flow run, named `<experiment>-iter-<k:03d>`, tagged with the experiment
and the iteration, versioned with the code version plus the config hash, and linked both ways with
its MLflow child run (the run carries the flow run id as a tag; the flow run carries a summary
artifact naming the MLflow run; the lake's `iterations` row holds both ids). Parameters stay small
and JSON (the config, the home, a Dask address); rows travel through the lake. The loop flow
holds one Dask cluster for all its iterations (a local one unless an address is given).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from prefect import flow, tags
from prefect.context import TagsContext
from prefect.runtime import flow_run

from aitp.home import resolve_home
from aitp.loop import LoopConfig, open_experiment
from aitp.loop.experiment import experiment_config
from aitp.loop.iteration import Event, run_iteration
from aitp.loop.stages import is_finished
from aitp.rollouts.cluster import dask_client, loop_cluster
from aitp.services import mlflow_uri
from tasks.artifacts import ArtifactReporter
from tasks.loop import call_as_task

LISTENERS: list[Event] = []
"""In-process listeners of loop events (the CLI's live display); flows run by a worker have none."""


def _emit(*handlers: Event) -> Event:
    def emit(kind: str, payload: dict[str, Any]) -> None:
        for handler in (*handlers, *LISTENERS):
            handler(kind, payload)

    return emit


@flow(name="aitp-iteration", persist_result=False)
def iteration_flow(
    config: dict[str, Any], home: str, iteration: int, dask_address: str | None = None, new_version: bool = False
) -> dict[str, Any]:
    """One iteration of an experiment: items, rollouts, train, register, eval, promote, plot."""
    cfg = LoopConfig.model_validate(config)
    root = resolve_home(home)
    run = open_experiment(root, cfg, new_version=new_version, tracking_uri=mlflow_uri(root))
    events = _emit(ArtifactReporter(cfg.experiment, run.registry.uri))
    # The tags belong to the flow run. Task runs would inherit them, and Prefect asks the server for
    # tag concurrency slots at every task run start (~1 s each on the embedded server).
    with TagsContext(current_tags=set()):
        if not cfg.rolls_out(iteration):
            return run_iteration(run, iteration, None, call_as_task, events, flow_run_id=str(flow_run.id))
        with dask_client(dask_address, cfg.rollouts.workers) as client:
            return run_iteration(run, iteration, client, call_as_task, events, flow_run_id=str(flow_run.id))


@contextmanager
def _cluster(address: str | None, workers: int | None, needed: bool, device: str | None) -> Iterator[str | None]:
    """The scheduler address the iterations share: the given one, or a local cluster's for the loop."""
    if address or not needed:
        yield address
        return
    with loop_cluster(device, workers) as cluster:  # issue 13: one GPU worker per visible GPU on CUDA
        yield cluster.scheduler_address


@flow(name="aitp-loop", persist_result=False)
def loop_flow(
    config: str | None = None,
    overrides: list[str] | None = None,
    home: str | None = None,
    resume: str | None = None,
    iterations: int | None = None,
    new_version: bool = False,
    dask_address: str | None = None,
) -> list[dict[str, Any]]:
    """Run an experiment's iterations 0..N as iteration flow runs, skipping finished ones (resume)."""
    root = resolve_home(home)
    cfg = experiment_config(root, config, overrides or [], resume)
    run = open_experiment(root, cfg, new_version=new_version, tracking_uri=mlflow_uri(root))
    last = cfg.iterations if iterations is None else iterations
    todo = [k for k in range(last + 1) if not is_finished(run, k)]
    needs_dask = any(cfg.rolls_out(k) for k in todo)
    rows = []
    with (
        run.registry.experiment_run(cfg.experiment),  # issue 13: the parent run ends with the loop
        _cluster(dask_address or cfg.rollouts.dask_address, cfg.rollouts.workers, needs_dask, cfg.device) as address,
    ):
        for k in todo:
            named = iteration_flow.with_options(flow_run_name=run.flow_run_name(k), version=run.version)
            with tags(cfg.experiment, f"iteration:{k:03d}", f"config:{run.config_hash}"):
                row = named(cfg.model_dump(mode="json"), str(root), k, address, new_version)
            rows.append(row)
            target = cfg.target_pass_rate
            if target is not None and (row.get("champion_pass_rate") or 0.0) >= target:
                break
    return rows

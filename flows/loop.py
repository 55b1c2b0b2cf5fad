"""Prefect flows: one iteration (items -> rollouts -> train -> register -> eval -> promote) and the loop.

Each iteration is its own flow run, named `<experiment>-iter-<k:03d>`, tagged with the experiment
and the iteration, versioned with the code version plus the config hash, and linked both ways with
its MLflow child run (the run carries the flow run id as a tag; the flow run carries a summary
artifact naming the MLflow run; the lake's `iterations` row holds both ids). The validated config
travels whole from the caller (the CLI, or a deployment that names a file, loaded once here);
rows travel through the lake. The loop flow holds one Dask cluster for all its iterations, and the
experiment's writer lock (`aitp.loop.writer_lock`) for all of them.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from prefect import flow, tags
from prefect.context import TagsContext
from prefect.runtime import flow_run

from aitp.fanout.cluster import dask_client, loop_cluster
from aitp.fanout.config import FanoutConfig
from aitp.home import resolve_home
from aitp.lake import is_finished
from aitp.loop import LoopConfig, LoopRun, Stages, open_experiment, run_iteration
from aitp.loop.experiment import experiment_config
from aitp.loop.iteration import Event, broadcast
from aitp.loop.writer_lock import writer_lock
from aitp.services import mlflow_uri
from tasks import loop as prefect_tasks
from tasks.artifacts import ArtifactReporter

PREFECT_STAGES = Stages(
    items=prefect_tasks.commit_items,
    act=prefect_tasks.act_on_chunk,
    train=prefect_tasks.train,
    register=prefect_tasks.register,
    evaluate=prefect_tasks.evaluate,
    promote=prefect_tasks.promote,
    plot=prefect_tasks.plot,
)
"""The iteration's stages, in order, each run as its Prefect task."""


@flow(name="aitp-iteration", persist_result=False)
def iteration_flow(
    config: LoopConfig,
    home: str,
    iteration: int,
    dask_address: str | None = None,
    listeners: list[Event] | None = None,
) -> dict[str, Any]:
    """One iteration of an experiment: items, rollouts, train, register, eval, promote, plot."""
    root = resolve_home(home)
    # The loop flow holds the writer lock already (this process's hold, joined); an iteration run on its own
    # takes it here, before it writes anything.
    with writer_lock(root, config.experiment):
        run = LoopRun(root, config, tracking_uri=mlflow_uri(root))
        events = broadcast(ArtifactReporter(config.experiment, run.registry.uri), *(listeners or []))
        # The tags belong to the flow run. Task runs would inherit them, and Prefect asks the server for
        # tag concurrency slots at every task run start (~1 s each on the embedded server).
        with TagsContext(current_tags=set()):
            # An iteration that does not act still gets a client where there is a cluster: it readies the
            # workers for the next iteration's acting.
            if not run.environment.acts(iteration) and dask_address is None:
                return run_iteration(run, iteration, None, PREFECT_STAGES, events, flow_run_id=str(flow_run.id))
            with dask_client(dask_address, config.fanout.workers, config.fanout.gpus) as client:
                return run_iteration(run, iteration, client, PREFECT_STAGES, events, flow_run_id=str(flow_run.id))


@contextmanager
def _cluster(address: str | None, fanout: FanoutConfig, needed: bool, device: str | None) -> Iterator[str | None]:
    """The scheduler address the iterations share: the given one, or a local cluster's for the loop."""
    if address or not needed:
        yield address
        return
    with loop_cluster(device, fanout.workers, gpus=fanout.gpus) as cluster:  # a GPU worker per card on CUDA
        yield cluster.scheduler_address


def _warm(address: str, run: LoopRun) -> None:
    """Let the environment start its workers' slow first work now (a decoder's compile): the warm start trains
    meanwhile, and the first shards find them ready."""
    with dask_client(address) as client:
        run.environment.warm_up(client)


@flow(name="aitp-loop", persist_result=False)
def loop_flow(
    config: LoopConfig | str | None = None,
    overrides: list[str] | None = None,
    home: str | None = None,
    resume: str | None = None,
    iterations: int | None = None,
    new_version: bool = False,
    dask_address: str | None = None,
    listeners: list[Event] | None = None,
) -> list[dict[str, Any]]:
    """Run an experiment's iterations 0..N as iteration flow runs, skipping finished ones (resume).

    `config` is the validated config (from the CLI), or a YAML path (from a deployment) loaded once
    here with `overrides`, or None with `resume` (the experiment's recorded config).
    """
    root = resolve_home(home)
    if isinstance(config, LoopConfig):
        cfg = config
    else:
        cfg = experiment_config(root, config, overrides or [], resume)
    # One writer per experiment, whoever started this flow run (a deployment, a trigger, `aitp run`, which holds
    # the lock already and joins its own hold); a second is refused before it writes anything.
    with writer_lock(root, cfg.experiment):
        run = open_experiment(root, cfg, new_version=new_version, tracking_uri=mlflow_uri(root))
        last = cfg.iterations if iterations is None else iterations
        todo = [k for k in range(last + 1) if not is_finished(root, cfg.experiment, k)]
        # acting fans out over Dask, and so does a training over several nodes (one launcher agent per worker)
        needs_dask = any(run.environment.acts(k) or run.environment.trains_on_nodes(k) for k in todo)
        rows = []
        with (
            run.registry.experiment_run(cfg.experiment),  # the parent run ends with the loop
            _cluster(dask_address or cfg.fanout.dask_address, cfg.fanout, needs_dask, cfg.device) as address,
        ):
            if address:
                _warm(address, run)
            for k in todo:
                named = iteration_flow.with_options(flow_run_name=run.flow_run_name(k), version=run.version)
                with tags(cfg.experiment, f"iteration:{k:03d}", f"config:{run.config_hash}"):
                    row = named(cfg, str(root), k, address, listeners)
                rows.append(row)
                target = cfg.target_pass_rate
                if target is not None and (row.get("champion_pass_rate") or 0.0) >= target:
                    break
    return rows

"""The stages of one iteration, each committed to the lake (or the registry) and skipped once committed.

An iteration k is: items -> acting (in chunks) -> train -> register -> eval -> promote -> finish.
Every stage first looks for its own committed output, so a run killed anywhere and started again
continues at the first stage that is not committed, reusing what is (no duplicate rows, no
repeated training). Stages hand each other nothing in memory but small summaries: what a stage
needs it reads back from the lake, the checkpoint directory or the registry. What is specific to a
world (what an item is, how a policy acts, how examples are selected) comes from the run's
environment (`aitp.environment`); these functions are the same for every environment.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aitp.environment import ActSummary, Progress
from aitp.lake import commits, committed_shards, read_iteration, record_iteration, write_partition
from aitp.loop.experiment import LoopRun
from aitp.policies.spec import PolicySpec

ITEMS_SHARD = "train"


# -- items ------------------------------------------------------------------------------------


def commit_items(run: LoopRun, iteration: int) -> int:
    """Commit the iteration's items to the environment's items table (demonstrations read them back)."""
    env = run.environment
    done = [c for c in commits(run.home, env.items_table, run.experiment, iteration) if c.shard == ITEMS_SHARD]
    if done:
        return done[0].rows
    rows = env.item_rows(env.items(iteration))
    write_partition(run.home, env.items_table, run.experiment, iteration, rows, shard=ITEMS_SHARD)
    return len(rows)


# -- acting -----------------------------------------------------------------------------------


def chunk_name(index: int) -> str:
    return f"chunk-{index:04d}"


def item_chunks(run: LoopRun, iteration: int) -> list[list[Any]]:
    """The iteration's items cut into committed chunks (the unit of resume)."""
    items, size = list(run.environment.items(iteration)), run.environment.chunk_items
    return [items[i : i + size] for i in range(0, len(items), size)]


def _committed_chunks(run: LoopRun, iteration: int) -> set[str]:
    """Chunks committed to every table the environment's acting writes."""
    tables = run.environment.acted_tables
    return set.intersection(*(set(committed_shards(run.home, t, run.experiment, iteration)) for t in tables))


def pending_chunks(run: LoopRun, iteration: int) -> list[int]:
    """Indices of the iteration's chunks not yet committed."""
    done = _committed_chunks(run, iteration)
    return [i for i in range(len(item_chunks(run, iteration))) if chunk_name(i) not in done]


def act_on_chunk(
    run: LoopRun,
    iteration: int,
    index: int,
    policy: PolicySpec,
    client: Any = None,
    on_progress: Progress | None = None,
) -> int:
    """Let the policy act on one chunk of items (on Dask), commit the scored rows; return their count."""
    env, shard = run.environment, chunk_name(index)
    if shard in _committed_chunks(run, iteration):
        written = [c for t in env.acted_tables for c in commits(run.home, t, run.experiment, iteration)]
        return sum(c.rows for c in written if c.shard == shard)
    rows = env.act(item_chunks(run, iteration)[index], policy, iteration, client, on_progress)
    for table in env.acted_tables:
        write_partition(run.home, table, run.experiment, iteration, rows.get(table, []), shard=shard)
    return sum(len(r) for r in rows.values())


def act_summary(run: LoopRun, iteration: int) -> ActSummary:
    """What the iteration's committed acting produced."""
    return run.environment.summarize(run.home, run.experiment, iteration)


# -- models -----------------------------------------------------------------------------------


def starting_policy(run: LoopRun, iteration: int) -> PolicySpec:
    """The model an iteration starts from: the one it recorded when it first started, else the champion, else
    the configured policy. A redo after `lake check --repair` must start where the first attempt did, even when
    later iterations have crowned another champion since: its rollouts then come back the same."""
    from aitp.policies.spec import model_id

    recorded = (iteration_row(run, iteration) or {}).get("model_in")
    version = version_of_model(run, recorded) if recorded else None
    if version is None and recorded and recorded == model_id(run.environment.starting_policy):
        return run.environment.starting_policy
    version = version or run.registry.get(run.experiment, "champion")
    if version is None:
        return run.environment.starting_policy
    return run.environment.starting_policy.with_path(run.registry.checkpoint_path(version))


def _sampled_at(run: LoopRun, iteration: int) -> int:
    """The iteration whose starting model samples this iteration's rollouts: itself, or with `rollouts.overlap`
    the one before it (it samples while that one trains). A rule of the config alone, so chunks acted ahead,
    and those a resumed run acts later, come from the same model."""
    return iteration - 1 if run.environment.acts_ahead(iteration) else iteration


def acting_policy(run: LoopRun, iteration: int) -> PolicySpec:
    """The model that samples an iteration's rollouts (see `_sampled_at`)."""
    return starting_policy(run, _sampled_at(run, iteration))


def policy_lag(run: LoopRun, iteration: int) -> int:
    """Champions crowned between the model that sampled the iteration's rollouts and the one it trains from."""
    return sum(
        1 for k in range(_sampled_at(run, iteration), iteration) if (iteration_row(run, k) or {}).get("promoted")
    )


def _registered(run: LoopRun) -> list[tuple[str, dict[str, str]]]:
    """(version, tags) of every registered version of the experiment's model."""
    from aitp.registry import model_name

    reg = run.registry
    found = reg.call(
        "search model versions", reg.client.search_model_versions, f"name = '{model_name(run.experiment)}'"
    )
    return [(str(mv.version), dict(mv.tags or {})) for mv in found]


def version_of_model(run: LoopRun, model: str) -> Any:
    """The registered version holding a model id (any of them: equal ids are equal weights), or None."""
    from aitp.registry.store import TAG

    for version, tags in _registered(run):
        if tags.get(TAG + "model_version") == model:
            return run.registry.get(run.experiment, version)
    return None


def train_stage(run: LoopRun, iteration: int, base: PolicySpec, client: Any = None) -> Path:
    """Train the iteration's checkpoint from `base` (skipped when a complete checkpoint is there); a training over
    several nodes runs on the workers of the Dask cluster `client`."""
    from aitp.checkpoints import CheckpointError, verify_checkpoint
    from aitp.train.checkpoint import checkpoint_dir

    out = checkpoint_dir(run.home, run.experiment, iteration)
    try:
        verify_checkpoint(out)
        return out
    except CheckpointError:
        pass
    return run.environment.train(run.home, run.experiment, iteration, base, out, client)


def train_figures(checkpoint: Path) -> dict[str, Any]:
    """What the iteration's row records of its training: grpo's sampler/trainer log-prob gap, when measured."""
    from aitp.checkpoints import read_record

    gap = read_record(checkpoint).get("logprob_gap")
    return {} if gap is None else {"logprob_gap": gap}


def registered_version(run: LoopRun, iteration: int, checkpoint: Path) -> str | None:
    """The registry version already holding this iteration's checkpoint, if it was registered."""
    from aitp.fingerprint import fingerprint
    from aitp.registry.store import TAG

    wanted = fingerprint(checkpoint)
    for version, tags in _registered(run):
        if tags.get(TAG + "iteration") == str(iteration) and tags.get(TAG + "model_version") == wanted:
            return version
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
    from aitp.loop.evaluation import evaluate_version

    return evaluate_version(run.registry, run.experiment, iteration, version, run.environment.evaluator)


def promote_stage(run: LoopRun, iteration: int, version: str) -> dict[str, Any]:
    """The promotion gate for the iteration's challenger; the decision and the champion after it."""
    from aitp.loop.evaluation import gate

    decision = gate(run.registry, run.experiment, iteration, run.environment.evaluator, run.config.promotion, version)
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


# -- the iteration's row and its plot -----------------------------------------------------------


def iteration_row(run: LoopRun, iteration: int) -> dict[str, Any] | None:
    """The lake's `iterations` row of an iteration (None before it started)."""
    return read_iteration(run.home, run.experiment, iteration)


def record(run: LoopRun, iteration: int, **fields: Any) -> None:
    """Merge fields into the iteration's row."""
    record_iteration(run.home, run.experiment, iteration, fields)


def log_plot(run: LoopRun, iteration: int) -> Path:
    """Draw the held-out pass rate per task over iterations and log the PNG to the iteration's MLflow run."""
    from aitp.report.plots import plot_iterations

    png = plot_iterations(run.home, run.experiment, run.home / "reports" / run.experiment / f"iter-{iteration:03d}.png")
    run_id = run.registry.iteration_run(run.experiment, iteration)
    run.registry.call("log the plot", run.registry.client.log_artifact, run_id, str(png), "plots")
    return png

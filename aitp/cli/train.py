"""`aitp train`, `aitp eval`, `aitp promote`: each reads and writes the lake and the registry of `<home>`.

Heavy imports (torch, Lightning, MLflow) happen inside the commands, so `aitp --help` stays fast.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

from aitp.cli.app import app
from aitp.errors import BadInputError

HOME_HELP = "Home directory (default: $AITP_HOME, else ./data)."
SET_HELP = "Override a config key, e.g. --set steps=200 (repeatable)."


def _spec(text: str, option: str) -> str | dict:
    """A policy spec from the command line: JSON for a dict spec, else a path or name."""
    if not text.lstrip().startswith("{"):
        return text
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadInputError(f"{option} looks like JSON but is not ({exc.msg}): pass a valid JSON object") from None


@app.command("train")
def train_command(
    experiment: str = typer.Option(..., help="Experiment name."),
    iteration: int = typer.Option(..., help="Iteration whose lake rows are trained on."),
    base: str = typer.Option(..., help="Base policy: checkpoint dir, .gguf, tiny, smollm2, or a JSON spec."),
    config: Path | None = typer.Option(None, help="TrainConfig YAML (objective, demonstrations, steps, ...)."),
    set_: list[str] = typer.Option([], "--set", help=SET_HELP),
    out: Path | None = typer.Option(None, help="Checkpoint directory (default <home>/checkpoints/<exp>/iter-<k>)."),
    register: bool = typer.Option(True, help="Log the run to MLflow and register the checkpoint as challenger."),
    home: Path | None = typer.Option(None, help=HOME_HELP),
) -> None:
    """Train a policy on examples selected from the lake; register the checkpoint as `challenger`."""
    from aitp.configs import load_config
    from aitp.home import resolve_home
    from aitp.loop.writer_lock import writer_lock
    from aitp.registry import Registry
    from aitp.train.config import TrainConfig
    from aitp.train.run import train

    cfg = load_config(TrainConfig, config, set_)  # bad input fails before the home is created
    spec = _spec(base, "--base")
    home = resolve_home(home)
    # It writes the experiment's checkpoint directory and moves `challenger`: as the loop does, one writer at a time.
    with writer_lock(home, experiment):
        registry = Registry(home) if register else None
        if registry is not None:
            run_id = registry.iteration_run(experiment, iteration)  # fails fast when the registry is unreachable
            with registry.system_metrics(run_id):
                path = train(home, experiment, iteration, spec, cfg, out)
            registry.log_training(experiment, iteration, path)
            mv = registry.register(experiment, iteration, path)
            print(
                f"checkpoint {path}\nregistered {mv.name} version {mv.version} (model {mv.model_version}) as challenger"
            )
        else:
            print(f"checkpoint {train(home, experiment, iteration, spec, cfg, out)}")


@app.command("eval")
def eval_command(
    experiment: str = typer.Option(..., help="Experiment name (its eval set version is pinned)."),
    iteration: int = typer.Option(..., help="Iteration the eval rows belong to."),
    checkpoint: str | None = typer.Option(None, help="Checkpoint dir or policy spec to evaluate."),
    version: str | None = typer.Option(None, help="Or a registered version: number, challenger, champion."),
    config: Path | None = typer.Option(None, help="EvalConfig YAML (tasks, n_per_task, temperature, ...)."),
    set_: list[str] = typer.Option([], "--set", help=SET_HELP),
    track: bool = typer.Option(True, help="Log metrics and samples to the iteration's MLflow run."),
    home: Path | None = typer.Option(None, help=HOME_HELP),
) -> None:
    """Evaluate a checkpoint on the fixed eval set: pass rate (95% CI), format errors, tokens per task and level."""
    from aitp.configs import load_config
    from aitp.home import resolve_home
    from aitp.loop.evaluation import evaluate_version
    from aitp.reasoning.evaluate import EvalConfig, EvalSetEvaluator, evaluate
    from aitp.reasoning.tasks import task_info
    from aitp.registry import Registry

    if (checkpoint is None) == (version is None):
        raise BadInputError("pass exactly one of --checkpoint PATH or --version REF (a number, challenger, champion)")
    cfg = load_config(EvalConfig, config, set_)  # bad input fails before the home is created
    for task in cfg.tasks:
        task_info(task)
    spec = _spec(checkpoint, "--checkpoint") if checkpoint is not None else None
    home = resolve_home(home)
    from aitp.loop.writer_lock import writer_lock

    with writer_lock(home, experiment):  # it commits `evals` rows of the experiment: one writer at a time
        registry = Registry(home) if track or version is not None else None
        if version is not None:
            result = evaluate_version(registry, experiment, iteration, version, EvalSetEvaluator(cfg), role=version)
        else:
            result = evaluate(home, experiment, iteration, spec, cfg)
            if registry is not None:
                registry.log_eval(result)
        if registry is not None:
            run_id = registry.iteration_run(experiment, iteration)
            registry.log_json(run_id, cfg.model_dump(mode="json"), f"config/eval-{cfg.name}.json")
    _print_eval(result)


def _print_eval(result) -> None:
    print(f"model {result.model_version} on {result.eval_name} ({result.seconds:.1f}s)")
    print("task\tlevel\tn\tpass_rate\tci95\tformat_errors\tmean_tokens")
    from aitp.paired import wilson

    for r in result.rows:
        low, high = wilson(r["n_pass"], r["n_samples"])
        level = "-" if r["difficulty_level"] is None else r["difficulty_level"]
        print(
            f"{r['task']}\t{level}\t{r['n_samples']}\t{r['pass_rate']:.3f}\t[{low:.3f}, {high:.3f}]\t"
            f"{r['format_error_rate']:.3f}\t{r['mean_completion_tokens']:.1f}"
        )
    m = result.metrics()
    print(
        f"overall\t-\t{int(m['n_samples'])}\t{m['pass_rate']:.3f}\t[{m['pass_rate_ci95_low']:.3f}, "
        f"{m['pass_rate_ci95_high']:.3f}]\t{m['format_error_rate']:.3f}\t{m['mean_completion_tokens']:.1f}"
    )


@app.command("promote")
def promote_command(
    experiment: str = typer.Option(..., help="Experiment name."),
    iteration: int = typer.Option(0, help="Iteration the decision is recorded under."),
    challenger: str = typer.Option("challenger", help="Version to promote: number or alias."),
    config: Path | None = typer.Option(None, help="PromotionConfig YAML (metric, margin)."),
    eval_config: Path | None = typer.Option(None, help="EvalConfig YAML of the eval set both are compared on."),
    margin: float | None = typer.Option(None, help="Override the config's margin."),
    rollback: bool = typer.Option(False, "--rollback", help="Restore the previous champion instead."),
    home: Path | None = typer.Option(None, help=HOME_HELP),
) -> None:
    """Promote the challenger to champion if it beats the champion by the margin; or --rollback."""
    from aitp.configs import load_config
    from aitp.home import resolve_home
    from aitp.loop.evaluation import gate
    from aitp.loop.writer_lock import writer_lock
    from aitp.reasoning.evaluate import EvalConfig, EvalSetEvaluator
    from aitp.registry import PromotionConfig, Registry
    from aitp.registry import rollback as do_rollback

    if not rollback:  # bad configs fail before the home or the registry is created
        cfg = load_config(PromotionConfig, config, [] if margin is None else [f"margin={margin}"])
        eval_cfg = load_config(EvalConfig, eval_config)
    root = resolve_home(home)
    # Moving aliases under a run mid-iteration leaves its `iterations` record naming another champion than
    # MLflow's: the experiment's writer lock, taken before the registry is even opened.
    with writer_lock(root, experiment):
        registry = Registry(root)
        if rollback:
            decision = do_rollback(registry, experiment)
        else:
            decision = gate(registry, experiment, iteration, EvalSetEvaluator(eval_cfg), cfg, challenger)
        print(decision.reason)
        print("aliases: " + ", ".join(f"{k}=v{v}" for k, v in sorted(registry.aliases(experiment).items())))

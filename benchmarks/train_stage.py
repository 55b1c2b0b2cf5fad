"""The loop's training stage on its own: an iteration's fit, timed by phase, alone or beside the loop's cluster.

    python benchmarks/train_stage.py [--config configs/gpu.yaml] [--iteration 1] [--per-task 280] [--fits 2]
        [--steps N] [--cluster none|idle] [--set KEY=VALUE ...] [--json OUT]

The loop trains inside its flow process, on the kept completions of its rollouts. This fits the
config's training of `--iteration` (its steps, batch, learning rate and strategy) on `--per-task`
demonstrations of each of the config's tasks (the question, then the gold answer in the answer tags:
rows about as long as the loop's kept ones), `--fits` times in one process as the loop does. Each fit
prints its phases (load, setup, steps, teardown, save: `aitp.train.run.TrainResult.phases`) and the
tokens/s of its steps. `--cluster idle` first starts the loop's own local Dask cluster in the same
process (a worker per visible GPU beside CPU workers) and leaves it idle, as the flow process holds it
while it trains.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

from aitp.configs import load_config
from aitp.loop.config import LoopConfig
from aitp.reasoning.items import generate_items
from aitp.train.config import TrainConfig
from aitp.train.data import demonstration
from aitp.train.run import TrainResult, fit


def demonstrations(config: LoopConfig, per_task: int) -> list[dict[str, Any]]:
    """`per_task` training demonstrations of each of the config's tasks, as the loop's examples."""
    out, world = [], config.environment
    for task in world.tasks:
        for item in generate_items(task.name, per_task, config.seed, task_config=task.config):
            example = demonstration(item.question, item.answer, world.system_prompt)
            out.append({"item_id": f"{task.name}-{item.index}", "task": task.name, **example})
    return out


def steps_rate(result: TrainResult) -> float:
    """Tokens per second of a fit's steps (padding excluded)."""
    return result.tokens / result.phases["steps_s"] if result.phases.get("steps_s") else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/gpu.yaml")
    parser.add_argument("--set", action="append", default=[], help="a config override, as for `aitp run`")
    parser.add_argument("--iteration", type=int, default=1, help="whose training (0: the warm start)")
    parser.add_argument("--per-task", type=int, default=280, help="demonstrations of each task")
    parser.add_argument("--fits", type=int, default=2, help="fits in this process, one after another")
    parser.add_argument("--steps", type=int, help="steps of each fit (default: the config's)")
    parser.add_argument("--cluster", choices=["none", "idle"], default="none")
    parser.add_argument("--json", help="also write the records here")
    args = parser.parse_args()

    config = load_config(LoopConfig, args.config, args.set)
    train = config.environment.train_config(args.iteration, config.seed)
    if args.steps:
        train = TrainConfig.model_validate({**train.model_dump(), "steps": args.steps})
    examples = demonstrations(config, args.per_task)
    cluster = client = None
    if args.cluster == "idle":
        from distributed import Client

        from aitp.fanout.cluster import loop_cluster

        cluster = loop_cluster(config.device)
        client = Client(cluster, set_as_default=False)
        client.wait_for_workers(len(cluster.worker_spec))
        print(f"an idle local cluster of {len(cluster.worker_spec)} workers in this process")
    records = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for k in range(args.fits):
                result = fit(examples, config.environment.policy, train, Path(tmp) / f"fit-{k}", {"fit": k})
                phases = "  ".join(f"{name} {seconds:.2f}" for name, seconds in result.phases.items())
                print(
                    f"fit {k}: {len(examples):,} examples, {result.steps} steps, {result.tokens:,} tokens, "
                    f"{steps_rate(result):,.0f} tokens/s over the steps; {phases}; {result.strategy} on {result.device}"
                )
                records.append({k: v for k, v in result.to_dict().items() if k != "losses"})
    finally:
        if client is not None:
            client.close()
        if cluster is not None:
            cluster.close()
    if args.json:
        Path(args.json).write_text(json.dumps({"cluster": args.cluster, "fits": records}, indent=2))


if __name__ == "__main__":
    main()
